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

// PodCreateFailure returns the PodCreateFailed reason and message for a
// failed create: the class of the failure (the API's reason, such as
// Invalid, Forbidden, InternalError or ServiceUnavailable; Unknown for a
// failure without one, such as a client-side timeout) and its message,
// capped. The pod's name
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
