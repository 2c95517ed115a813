package taskset

import (
	"regexp"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// maxFailureMessage caps the ReplicaFailure message. The API refuses a
// condition message over 32768 bytes, and with it the whole status write; an
// error that quotes a 64 KiB label value must not get that far. 1024 bytes
// say what went wrong and keep the status small.
const maxFailureMessage = 1024

// generatedSuffix matches the five characters the API server appends to a
// generateName (k8s.io/apiserver's names.SimpleNameGenerator uses this
// alphabet).
const generatedSuffix = `[bcdfghjklmnpqrstvwxz2456789]{5}`

// failureMessage is the ReplicaFailure message for err. The names the API
// server generated for the set's tasks are replaced by a placeholder: a
// create the API refuses names a new random task every time, and a message
// that changed on every attempt would be a status write on every attempt,
// each waking the set again. The same failure now reads the same, so a
// standing failure costs no writes at all, and the queue's backoff paces
// the retries.
func failureMessage(set *gputaskv1.GPUTaskSet, err error) string {
	generated := regexp.MustCompile(regexp.QuoteMeta(set.Name+"-") + generatedSuffix + `\b`)
	return gputaskv1.TruncateMessage(generated.ReplaceAllLiteralString(err.Error(), set.Name+"-*"), maxFailureMessage)
}
