package v1

// Event reasons: every reason a controller of this project records an
// Event under, each defined once, here. docs/events.md says what each one
// means and what a user does about it. Some are condition reasons too, and
// the reschedule reasons name the metric label of a replacement.
const (
	// Events on a GPUTask, from the GPUTask controller.

	// ReasonFailedCreate (Warning): the task's pod, or its GPU claim, or a
	// set's task, could not be created; the message holds the API
	// server's answer.
	ReasonFailedCreate = "FailedCreate"
	// ReasonFailedDelete (Warning): a pod being replaced, or a set's task
	// being removed, could not be deleted.
	ReasonFailedDelete = "FailedDelete"
	// ReasonRescheduling (Normal): the pod was deleted to be placed again.
	ReasonRescheduling = "Rescheduling"
	// ReasonRescheduled (Normal): the replacement pod was created.
	ReasonRescheduled = "Rescheduled"
	// ReasonBackOff (Warning): the task's pods failed in a row, and the
	// replacement of the last one waits; the message says how long.
	ReasonBackOff = "BackOff"
	// ReasonRestarted (Normal): the pod was replaced as
	// gputask.io/restartedAt asked.
	ReasonRestarted = "Restarted"
	// ReasonForceDeleted (Warning): a pod on an unreachable node outlived
	// its grace period and was removed without waiting for its kubelet.
	ReasonForceDeleted = "ForceDeleted"
	// ReasonEvicted (Warning): someone else evicted the task's pod; also
	// the reschedule reason of the pod made in its place.
	ReasonEvicted = "Evicted"
	// ReasonPreempted (Warning): the scheduler preempted the task's pod
	// for one of higher priority; also a reschedule reason.
	ReasonPreempted = "Preempted"
	// ReasonPodConflict (Warning), also a condition reason: a pod with the
	// task's name exists and is not controlled by the task.
	ReasonPodConflict = "PodConflict"
	// ReasonInvalidRestartedAt (Warning), on a GPUTask or a GPUTaskSet: a
	// gputask.io/restartedAt annotation that is not an RFC 3339 time.
	ReasonInvalidRestartedAt = "InvalidRestartedAt"
	// ReasonInvalidSpec (Warning), also a condition reason, on a GPUTask or
	// a GPUTaskSet: a spec that cannot be acted on, with the field and why
	// in the message.
	ReasonInvalidSpec = "InvalidSpec"

	// Events on a GPUTaskSet, from the set controller. FailedCreate,
	// FailedDelete and InvalidRestartedAt above apply too.

	// ReasonSuccessfulCreate (Normal): tasks were created, counted per sync.
	ReasonSuccessfulCreate = "SuccessfulCreate"
	// ReasonSuccessfulDelete (Normal): tasks were deleted, counted per sync.
	ReasonSuccessfulDelete = "SuccessfulDelete"
	// ReasonRestartingTask (Normal): a task was marked to restart, one at
	// a time, as the set's gputask.io/restartedAt asked.
	ReasonRestartingTask = "RestartingTask"
	// ReasonFailedRestart (Warning): a task could not be marked to restart.
	ReasonFailedRestart = "FailedRestart"
	// ReasonDrainingTask (Normal): a busy task chosen for scale-in was
	// marked draining instead of deleted.
	ReasonDrainingTask = "DrainingTask"
	// ReasonUndrainTask (Normal): a scale-up took a draining task back.
	ReasonUndrainTask = "UndrainedTask"
	// ReasonFailedDrain (Warning): a task could not be marked draining.
	ReasonFailedDrain = "FailedDrain"
	// ReasonNodeDisrupted (Normal): tasks on nodes that a node autoscaler
	// is taking away (karpenter.sh/disrupted, or a node being deleted)
	// were taken out of service, busy ones marked draining and the others
	// deleted, counted per sync; their replacements are the sync's
	// SuccessfulCreate.
	ReasonNodeDisrupted = "NodeDisrupted"

	// Events on a GPUTaskSet, from the autoscaler. InvalidSpec above
	// applies too.

	// ReasonScaledUp and ReasonScaledDown (Normal): the autoscaler set
	// spec.replicas; the message holds the new size and why.
	ReasonScaledUp   = "ScaledUp"
	ReasonScaledDown = "ScaledDown"
	// ReasonDryRunScale (Normal): with dryRun, the size the autoscaler
	// would have set.
	ReasonDryRunScale = "DryRunScale"
	// ReasonFailedRescale (Warning): the write of the scale subresource
	// failed.
	ReasonFailedRescale = "FailedRescale"
	// ReasonTaskStartupTimeout (Warning): a task was not Ready within
	// autoscaling.startupTimeout, once per task.
	ReasonTaskStartupTimeout = "TaskStartupTimeout"
	// ReasonInvalidMetricSpec (Warning), also a condition reason: a
	// metric's source cannot be built (a bad URL, a Secret it may not
	// read).
	ReasonInvalidMetricSpec = "InvalidMetricSpec"
	// ReasonFailedGetLoadIndex (Warning): a load index could not be read.
	// The decision and the ScalingActive condition carry the same reason.
	ReasonFailedGetLoadIndex = "FailedGetLoadIndex"
	// ReasonEngineProfileUnavailable (Warning), also a condition and
	// decision reason: slo.engine names a profile the autoscaler cannot
	// read (a ConfigMap missing, without the gputask.io/engine-profile
	// label or the key, or not a profile); the count is held.
	ReasonEngineProfileUnavailable = "EngineProfileUnavailable"
)
