package taskstatus

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// maxPodCreateMessage caps the PodCreateFailed message: enough for the
// API's explanation, far below the condition's limit of 32768 bytes, whose
// excess would make the API refuse the status write itself.
const maxPodCreateMessage = 1024

// IsRefused tells whether the API server refused the pod for what it is
// (422 Invalid) or for who asks (403 Forbidden, which includes a quota):
// retrying the same pod will fail the same way until the task, a quota or
// a policy changes.
func IsRefused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
}

// PodCreateFailure returns the PodCreateFailed reason and message for a
// refused create: the API's reason and its message, capped. The pod's name
// is the task's, so the message is the same from one attempt to the next.
func PodCreateFailure(err error) (reason, msg string) {
	reason = string(apierrors.ReasonForError(err))
	if reason == "" {
		reason = "Unknown"
	}
	msg = err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		msg = status.Status().Message
	}
	return reason, gputaskv1.TruncateMessage(msg, maxPodCreateMessage)
}
