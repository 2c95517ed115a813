package taskset

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// scaleInHeldSuffix ends the InvalidSpec message.
const scaleInHeldSuffix = "; scale-in is held until it is fixed"

// invalidSpecMessage is the ReplicaFailure message for errs. It depends on
// the spec alone, so a set that stays invalid costs no status write, and it
// is capped like the other ReplicaFailure messages.
func invalidSpecMessage(errs field.ErrorList) string {
	msg := errs.ToAggregate().Error()
	return gputaskv1.TruncateMessage(msg, maxFailureMessage-len(scaleInHeldSuffix)) + scaleInHeldSuffix
}
