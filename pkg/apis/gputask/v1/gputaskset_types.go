package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUTaskSet condition types. They follow the HorizontalPodAutoscaler's.
const (
	// ConditionAbleToScale says whether the set can be scaled now: False while
	// paused, stopped, or waiting out a stabilization window or young tasks.
	ConditionAbleToScale = "AbleToScale"
	// ConditionScalingActive says whether the load index can be read and a
	// desired count computed: False with reason FailedGetLoadIndex on failure.
	ConditionScalingActive = "ScalingActive"
	// ConditionScalingLimited is True when the desired count was clamped by
	// minReplicas, maxReplicas, the scale-up limit or the GPU capacity.
	ConditionScalingLimited = "ScalingLimited"
	// ConditionFallback is True while the set runs fallback.replicas because the
	// load index failed failureThreshold times in a row.
	ConditionFallback = "Fallback"
	// ConditionReplicaFailure is True when the set could not create or delete a task.
	ConditionReplicaFailure = "ReplicaFailure"
)

// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=gts,categories=gpu
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="DESIRED",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="CURRENT",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="READY",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="RUNNING",type=integer,JSONPath=`.status.runningReplicas`
// +kubebuilder:printcolumn:name="STARTING",type=integer,JSONPath=`.status.startingReplicas`,priority=1
// +kubebuilder:printcolumn:name="DRAINING",type=integer,JSONPath=`.status.drainingReplicas`,priority=1
// +kubebuilder:printcolumn:name="NODES",type=integer,JSONPath=`.status.nodes`,priority=1
// +kubebuilder:printcolumn:name="LOAD",type=string,JSONPath=`.status.loadIndex`
// +kubebuilder:printcolumn:name="PREDICTED-WAIT",type=string,JSONPath=`.status.lastDecision.predictedWait`
// +kubebuilder:printcolumn:name="PREDICTED-TTFT",type=string,JSONPath=`.status.lastDecision.predictedTTFT`
// +kubebuilder:printcolumn:name="STOPPED",type=string,JSONPath=`.metadata.annotations.gputask\.io/stopped`
// +kubebuilder:printcolumn:name="ABLE",type=string,JSONPath=`.status.conditions[?(@.type=="AbleToScale")].reason`,priority=1
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 57",message="name must be at most 57 characters: task names add 6 and must fit a 63-character label value"

// GPUTaskSet keeps spec.replicas identical GPUTasks, made from spec.template.
// With spec.autoscaling it also sets spec.replicas from a load index.
type GPUTaskSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the pool to keep.
	// +required
	Spec GPUTaskSetSpec `json:"spec"`
	// Status is what the set controller and the autoscaler last observed.
	// +optional
	Status GPUTaskSetStatus `json:"status,omitempty"`
}

// GPUTaskSetSpec is the pool to keep.
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || !has(self.autoscaling.minReplicas) || self.autoscaling.minReplicas <= self.autoscaling.maxReplicas",message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas"
type GPUTaskSetSpec struct {
	// Replicas is how many tasks to keep. The autoscaler writes it through the
	// scale subresource, as do `kubectl scale` and an HPA.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	Replicas *int32 `json:"replicas,omitempty"`

	// Template is the GPUTask that each task of the set is made from. A change
	// applies to new tasks only; running tasks are kept.
	// +required
	Template GPUTaskTemplateSpec `json:"template"`

	// MinTaskAge protects new tasks: a Running task younger than this is never
	// removed by scale-in. Default 0 (no protection), at most 24h.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('24h')",message="minTaskAge must be between 0s and 24h"
	MinTaskAge *Duration `json:"minTaskAge,omitempty"`

	// ScaleIn says how tasks leave the set when it shrinks.
	// +optional
	ScaleIn *ScaleInSpec `json:"scaleIn,omitempty"`

	// Autoscaling sets replicas from a load index. Without it, replicas is kept as written.
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`
}

// ScaleInSpec says how tasks leave a set when it shrinks.
type ScaleInSpec struct {
	// DrainTimeout is how long a busy task (gputask.io/busy: "true" on the
	// task or its pod) chosen for removal is kept, marked
	// gputask.io/draining: "true", before it is deleted anyway. It is deleted
	// as soon as it is no longer busy. Default 10m, at most 24h; 0 deletes
	// busy tasks at once.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('24h')",message="drainTimeout must be between 0s and 24h"
	DrainTimeout *Duration `json:"drainTimeout,omitempty"`
}

// GPUTaskTemplateSpec is the GPUTask that each task of a set is made from.
type GPUTaskTemplateSpec struct {
	// Metadata holds the labels and annotations of each task.
	// +optional
	Metadata TaskTemplateMeta `json:"metadata,omitempty"`
	// Spec is each task's spec.
	// +required
	Spec GPUTaskSpec `json:"spec"`
}

// TaskTemplateMeta holds the labels and annotations given to each task of a set.
type TaskTemplateMeta struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ScalingPolicyType names how the autoscaler turns a load index into a count.
// +kubebuilder:validation:Enum=Step;Proportional;SLO
type ScalingPolicyType string

const (
	// StepPolicy adds stepUp tasks above upThreshold, removes stepDown below
	// downThreshold, and holds in between.
	StepPolicy ScalingPolicyType = "Step"
	// ProportionalPolicy follows the HPA rule: ceil(serving × value / target),
	// where serving is the Ready tasks while others start (the HPA's Ready
	// pods) and the current count otherwise, held while |value/target − 1|
	// is within the tolerance.
	ProportionalPolicy ScalingPolicyType = "Proportional"
	// SLOPolicy sizes the pool for a wait objective (policy.slo): the
	// smallest count whose slots, as one queue, keep the given percentile
	// of requests within the wait for the arrivals expected once a new task
	// would be Ready. Its metrics each have a role.
	SLOPolicy ScalingPolicyType = "SLO"
)

// MetricRole says what a metric of the SLO policy measures.
// +kubebuilder:validation:Enum=Arrivals;Completions;Running;Waiting;WaitPercentile;TTFTPercentile;InterTokenLatency;PromptTokens;GenerationTokens;GenerationTokensMedian;PromptTokensMedian;KVCacheUsage
type MetricRole string

const (
	// RoleArrivals is the rate at which requests arrive at the pool, per
	// second.
	RoleArrivals MetricRole = "Arrivals"
	// RoleCompletions is the rate at which the pool finishes requests, per
	// second, for sources that count finished requests only (such as
	// vLLM's request_success_total): the arrivals are the completions plus
	// the growth of the running and waiting requests.
	RoleCompletions MetricRole = "Completions"
	// RoleRunning is the number of requests the pool is serving, summed
	// over its tasks.
	RoleRunning MetricRole = "Running"
	// RoleWaiting is the number of requests waiting for a slot, summed over
	// the pool's tasks or its router.
	RoleWaiting MetricRole = "Waiting"
	// RoleWaitPercentile is the observed wait of requests, in seconds, at
	// the SLO's percentile; it corrects the model where the two disagree.
	RoleWaitPercentile MetricRole = "WaitPercentile"
	// RoleTTFTPercentile is the observed time to first token, in seconds,
	// at the SLO's percentile, such as histogram_quantile over vLLM's
	// vllm:time_to_first_token_seconds_bucket; it corrects the model
	// against a TTFT objective as WaitPercentile does against a wait one.
	RoleTTFTPercentile MetricRole = "TTFTPercentile"
	// RoleInterTokenLatency is the mean time between two output tokens of
	// a sequence, in seconds, over the serving tasks: vLLM's
	// rate(vllm:inter_token_latency_seconds_sum) over its _count. Read
	// against Running, it teaches the policy α + β·batch when no engine
	// profile is given.
	RoleInterTokenLatency MetricRole = "InterTokenLatency"
	// RolePromptTokens is the prompt tokens the pool receives per second
	// (rate of vllm:prompt_tokens_total): the share of a task's time that
	// prefill takes, and each prompt's part of the TTFT.
	RolePromptTokens MetricRole = "PromptTokens"
	// RoleGenerationTokens is the output tokens the pool generates per
	// second (rate of vllm:generation_tokens_total): with an ITL objective
	// it bounds how long a request holds its slot.
	RoleGenerationTokens MetricRole = "GenerationTokens"
	// RoleGenerationTokensMedian is the median output tokens of a finished
	// request (histogram_quantile(0.5, …) over vLLM's
	// vllm:request_generation_tokens_bucket). Read with GenerationTokens,
	// whose rate over the finished requests is the mean, it gives the mix
	// of output lengths that the ITL objective is kept over: a request of
	// a few tokens shares its few steps with the prompts its task prefills
	// meanwhile, and sees their prefill over few tokens.
	RoleGenerationTokensMedian MetricRole = "GenerationTokensMedian"
	// RolePromptTokensMedian is the median prompt tokens of a finished
	// request (histogram_quantile(0.5, …) over vLLM's
	// vllm:request_prompt_tokens_bucket). Read with PromptTokens, whose
	// rate over the requests is the mean, it gives the mix of prompt
	// lengths: one long prompt in a short request's steps is over the ITL
	// objective where many of the mean length would not be.
	RolePromptTokensMedian MetricRole = "PromptTokensMedian"
	// RoleKVCacheUsage is the share of the KV cache in use, from 0 to 1,
	// averaged over the serving tasks (vllm:kv_cache_usage_perc): with an
	// engine profile's KV cache size it gives the context the running
	// sequences hold, at which the profile's ITL is read.
	RoleKVCacheUsage MetricRole = "KVCacheUsage"
)

// AutoscalingSpec sets a set's replicas from one or more load indexes.
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.policy) || !has(self.policy.type) || self.policy.type != 'Proportional' || self.metrics.all(m, has(m.target))",message="every metric needs a target with the Proportional policy"
// +kubebuilder:validation:XValidation:rule="!has(self.policy) || !has(self.policy.type) || self.policy.type != 'SLO' || self.metrics.all(m, has(m.role))",message="every metric needs a role with the SLO policy"
// +kubebuilder:validation:XValidation:rule="(has(self.policy) && has(self.policy.type) && self.policy.type == 'SLO') || self.metrics.all(m, !has(m.role))",message="metric roles are read by the SLO policy only"
// +kubebuilder:validation:XValidation:rule="!has(self.policy) || !has(self.policy.type) || self.policy.type != 'SLO' || (self.metrics.exists(m, has(m.role) && m.role == 'Running') && self.metrics.exists(m, has(m.role) && (m.role == 'Arrivals' || m.role == 'Completions')))",message="the SLO policy needs a metric of role Running and one of role Arrivals or Completions"
// +kubebuilder:validation:XValidation:rule="self.metrics.all(m, !has(m.role) || self.metrics.exists_one(n, has(n.role) && n.role == m.role))",message="each role may be given to one metric only"
// +kubebuilder:validation:XValidation:rule="!has(self.policy) || !has(self.policy.type) || self.policy.type != 'SLO' || !has(self.burst)",message="burst applies to the Step and Proportional policies: the SLO policy sizes for the waiting requests itself"
// +kubebuilder:validation:XValidation:rule="!has(self.policy) || !has(self.policy.slo) || !has(self.policy.slo.ttft) || self.metrics.exists(m, has(m.role) && m.role == 'TTFTPercentile')",message="slo.ttft needs a metric of role TTFTPercentile: the observed TTFT corrects the model"
// +kubebuilder:validation:XValidation:rule="!has(self.policy) || !has(self.policy.slo) || !has(self.policy.slo.itl) || has(self.policy.slo.engine) || self.metrics.exists(m, has(m.role) && m.role == 'InterTokenLatency')",message="slo.itl needs an engine profile (slo.engine) or a metric of role InterTokenLatency to learn the engine from"
// +kubebuilder:validation:XValidation:rule="!self.metrics.exists(m, has(m.role) && m.role == 'PromptTokensMedian') || self.metrics.exists(m, has(m.role) && m.role == 'PromptTokens')",message="a metric of role PromptTokensMedian needs one of role PromptTokens: the mean prompt tokens of a request, beside the median, give the mix of prompt lengths"
// +kubebuilder:validation:XValidation:rule="!self.metrics.exists(m, has(m.role) && m.role == 'GenerationTokensMedian') || self.metrics.exists(m, has(m.role) && m.role == 'GenerationTokens')",message="a metric of role GenerationTokensMedian needs one of role GenerationTokens: the mean output tokens of a request, beside the median, give the mix of output lengths"
// +kubebuilder:validation:XValidation:rule="!has(self.policy) || !has(self.policy.slo) || !has(self.policy.slo.engine) || !has(self.policy.slo.itl) || (has(self.policy.slo.slotsPerTask) && self.policy.slo.slotsPerTask > 0) || self.metrics.exists(m, has(m.role) && m.role == 'KVCacheUsage')",message="the capacity from an engine profile needs a metric of role KVCacheUsage: the context the running sequences hold sets the ITL at a batch (or set slo.slotsPerTask)"
type AutoscalingSpec struct {
	// MinReplicas is the floor. Default 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the ceiling.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxReplicas int32 `json:"maxReplicas"`
	// Interval is how often the load index is read: from 1s to 1h. Default
	// 30s. The autoscaler also changes replicas at most once per interval,
	// whatever else happens in between (spec edits, annotation changes,
	// retries, a new leader).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="interval must be between 1s and 1h"
	Interval *Duration `json:"interval,omitempty"`
	// StartupTimeout is how long a task that is not yet Ready counts as
	// starting: more than 0s, at most 24h. While tasks are starting, Step
	// adds no more and Proportional scales up from the serving tasks only. A
	// task not Ready by then stops holding scale-up back, and a Warning event
	// names it. Default 10m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('24h')",message="startupTimeout must be more than 0s and at most 24h"
	StartupTimeout *Duration `json:"startupTimeout,omitempty"`

	// Metrics are the load indexes to read. With several, the largest desired
	// count wins, and while any of them fails the others never scale down.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Metrics []MetricSpec `json:"metrics"`

	// Policy turns a load index into a desired count.
	// +optional
	Policy ScalingPolicy `json:"policy,omitempty"`

	// ScaleDownStabilizationWindow: a scale-in goes no lower than the highest
	// count recommended within this window, so a short dip does not remove
	// tasks. Default 5m, as in the HPA; from 0s (off) to 1h.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="scaleDownStabilizationWindow must be between 0s and 1h"
	ScaleDownStabilizationWindow *Duration `json:"scaleDownStabilizationWindow,omitempty"`
	// ScaleUpLimit caps how many tasks may be added within a period.
	// +optional
	ScaleUpLimit *ScaleUpLimit `json:"scaleUpLimit,omitempty"`
	// Burst, when set, is a fast path for bursts, as Knative's panic mode:
	// a reading at factor times a metric's upThreshold (Step) or target
	// (Proportional) scales the set at once to what the load asks for,
	// beyond stepUp and the wait for starting tasks, within maxReplicas,
	// capacity and scaleUpLimit; and no scale-down happens until window has
	// passed without such a reading.
	// +optional
	Burst *BurstSpec `json:"burst,omitempty"`

	// Schedules are known peaks, as KEDA's cron scaler and AIBrix's
	// scheduled bounds: cron-style windows, each with a floor (and
	// optionally a ceiling) for the count while it is in force. With
	// several in force, the highest floor wins; the decision names it.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Schedules []ScheduleSpec `json:"schedules,omitempty"`

	// Predictive, when set, pre-warms the set for the demand it learned: it
	// asks for the tasks that the demand forecast for one lead time ahead
	// will need. The forecast only raises the count; reactive scaling still
	// decides scale-in.
	// +optional
	Predictive *PredictiveSpec `json:"predictive,omitempty"`

	// FailureThreshold is how many reads in a row must fail before fallback
	// applies. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	FailureThreshold *int32 `json:"failureThreshold,omitempty"`
	// Fallback is the count to run once the load index has failed
	// failureThreshold times in a row. Without it the count is held.
	// +optional
	Fallback *Fallback `json:"fallback,omitempty"`

	// CapacityAware caps scale-up at the tasks that fit: the allocatable GPUs of
	// the nodes that match the template's GPU model, minus the GPUs that
	// non-terminal pods on them request.
	// +optional
	CapacityAware bool `json:"capacityAware,omitempty"`
	// DryRun computes and reports each decision in status and events, but never
	// changes replicas.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// ScalingPolicy turns a load index into a desired count.
// +kubebuilder:validation:XValidation:rule="(has(self.type) && self.type == 'SLO') == has(self.slo)",message="slo is required by the SLO policy and read by it only"
type ScalingPolicy struct {
	// Type is Step (the default), Proportional or SLO.
	// +optional
	// +kubebuilder:default=Step
	Type ScalingPolicyType `json:"type,omitempty"`
	// StepUp is how many tasks Step adds above a metric's upThreshold. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	StepUp *int32 `json:"stepUp,omitempty"`
	// StepDown is how many tasks Step removes below a metric's downThreshold. Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	StepDown *int32 `json:"stepDown,omitempty"`
	// Tolerance is how far value/target may stray from 1 before Proportional
	// acts, from 0 to 1. Default 0.1, as in the HPA.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0')) && !quantity(string(self)).isGreaterThan(quantity('1'))",message="tolerance must be between 0 and 1"
	Tolerance *resource.Quantity `json:"tolerance,omitempty"`
	// SLO is the SLO policy's wait objective and what it needs to know of
	// a task. Required by the SLO policy.
	// +optional
	SLO *SLOSpec `json:"slo,omitempty"`
}

// SLOSpec is what the users of the pool are promised, such as 95 % of
// requests seeing their first token within 2s and their next tokens 50ms
// apart, and what the policy needs to know of a task to keep it.
// +kubebuilder:validation:XValidation:rule="has(self.wait) || has(self.ttft) || has(self.itl)",message="slo needs at least one of wait, ttft or itl"
// +kubebuilder:validation:XValidation:rule="(has(self.slotsPerTask) && self.slotsPerTask > 0) || has(self.itl)",message="without slotsPerTask a task's capacity comes from its engine at the ITL objective: set slo.itl or slo.slotsPerTask"
type SLOSpec struct {
	// Wait is the longest a request should wait for a slot: from 1s to 1h.
	// Without it the wait is bounded by ttft, or by 1s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="wait must be between 1s and 1h"
	Wait *Duration `json:"wait,omitempty"`
	// TTFT is the longest time to first token a request should see (its
	// wait plus its prompt's prefill): from 10ms to 1h. It needs a metric
	// of role TTFTPercentile.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10ms') && duration(self) <= duration('1h')",message="ttft must be between 10ms and 1h"
	TTFT *Duration `json:"ttft,omitempty"`
	// ITL is the longest time between two output tokens of a sequence:
	// from 1ms to 10s. A task then serves the largest batch whose ITL
	// stays within it, read from the engine profile or learned from the
	// InterTokenLatency metric.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('10s')",message="itl must be between 1ms and 10s"
	ITL *Duration `json:"itl,omitempty"`
	// Percentile is the share of requests, in percent, that should meet
	// each objective: from 50 to 99.9, such as 95 or "99.9" (a fraction is
	// written as a string). Default 95.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('50')) && !quantity(string(self)).isGreaterThan(quantity('99.9'))",message="percentile must be between 50 and 99.9"
	Percentile *resource.Quantity `json:"percentile,omitempty"`
	// SlotsPerTask, when above 0, is how many requests one task serves at
	// once, such as vLLM's --max-num-seqs: it overrides the capacity the
	// engine gives. 0 or absent: the capacity comes from the engine at the
	// ITL objective.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	SlotsPerTask int32 `json:"slotsPerTask,omitempty"`
	// ServiceTimeVariability is Cs², the squared coefficient of variation
	// of the time a request holds a slot (variance over the squared mean):
	// 1 for exponential service times, less for requests of alike length,
	// more when a few long requests dominate. From 0 to 100. Default 1.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0')) && !quantity(string(self)).isGreaterThan(quantity('100'))",message="serviceTimeVariability must be between 0 and 100"
	ServiceTimeVariability *resource.Quantity `json:"serviceTimeVariability,omitempty"`
	// Engine is the measured profile of the tasks' engine (the format of
	// pkg/gpuprofile): how its ITL grows with the batch and the context,
	// how fast it prefills and how many tokens its KV cache holds. Without
	// it the policy learns ITL = α + β·batch online from the
	// InterTokenLatency and Running metrics.
	// +optional
	Engine *EngineSpec `json:"engine,omitempty"`
}

// EngineSpec names an engine profile: one embedded in the controller, or
// one in a ConfigMap of the set's namespace.
// +kubebuilder:validation:XValidation:rule="has(self.profile) != has(self.configMapRef)",message="exactly one of profile or configMapRef must be set"
type EngineSpec struct {
	// Profile is the name of a profile embedded in the controller.
	// +optional
	// +kubebuilder:validation:Enum=h100-llama-3.1-8b;h200-llama-3.1-8b
	Profile string `json:"profile,omitempty"`
	// ConfigMapRef reads the profile's JSON from a key of a ConfigMap in
	// the set's namespace, labelled gputask.io/engine-profile: "true" (the
	// controller caches only those).
	// +optional
	ConfigMapRef *ConfigMapKeyRef `json:"configMapRef,omitempty"`
}

// ConfigMapKeyRef is a key of a ConfigMap in the referring object's
// namespace.
type ConfigMapKeyRef struct {
	// Name of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`
	// Key of the profile's JSON in the ConfigMap's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// ScaleUpLimit caps how many tasks may be added within a period.
type ScaleUpLimit struct {
	// Tasks is the most tasks added within Period.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Tasks int32 `json:"tasks"`
	// Period is the window the limit applies to: more than 0s, at most 1h. Default 1m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('1h')",message="period must be more than 0s and at most 1h"
	Period *Duration `json:"period,omitempty"`
}

// BurstSpec is the fast path for bursts.
type BurstSpec struct {
	// Factor is how many times a metric's upThreshold or target a reading
	// must reach to start a burst: from 1.1 to 100. Default 2, as
	// Knative's panic threshold.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('1100m')) && !quantity(string(self)).isGreaterThan(quantity('100'))",message="factor must be between 1.1 and 100"
	Factor *resource.Quantity `json:"factor,omitempty"`
	// Window is how long a burst lasts after its last burst reading: no
	// scale-down happens within it. From 0s to 1h. Default 60s, Knative's
	// stable window.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="window must be between 0s and 1h"
	Window *Duration `json:"window,omitempty"`
}

// PredictiveMode is Active or Preview.
// +kubebuilder:validation:Enum=Active;Preview
type PredictiveMode string

const (
	// PredictiveActive acts on the forecast.
	PredictiveActive PredictiveMode = "Active"
	// PredictivePreview computes and reports the forecast without acting,
	// as dryRun does for the whole autoscaler.
	PredictivePreview PredictiveMode = "Preview"
)

// PredictiveSpec is predictive pre-warming.
type PredictiveSpec struct {
	// Mode is Active (the default) or Preview.
	// +optional
	Mode PredictiveMode `json:"mode,omitempty"`
	// LeadTime is how far ahead the forecast looks: how long a new task
	// takes to serve. From 0s to 1h; default the set's startupTimeout.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="leadTime must be between 0s and 1h"
	LeadTime *Duration `json:"leadTime,omitempty"`
}

// PredictiveStatus is what predictive pre-warming learned and forecasts.
type PredictiveStatus struct {
	// History is the demand the set served, in tasks, by quarter hour of
	// the day, apart for weekdays and weekends (UTC), in a compact encoding
	// read by the autoscaler only.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	History string `json:"history,omitempty"`
	// ForecastReplicas is the count the forecast asks for one lead time
	// ahead; empty until enough history exists for that hour.
	// +optional
	ForecastReplicas *int32 `json:"forecastReplicas,omitempty"`
	// Message says what the forecast is based on, or why there is none.
	// +optional
	Message string `json:"message,omitempty"`
}

// ScheduleSpec is one window of a known peak.
// +kubebuilder:validation:XValidation:rule="!has(self.maxReplicas) || self.maxReplicas >= self.minReplicas",message="maxReplicas must be at least minReplicas"
type ScheduleSpec struct {
	// Name identifies the window in decisions and events.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Start is when the window opens, as a cron expression of five fields
	// (minute, hour, day of month, month, day of week), such as
	// "0 9 * * 1-5" for nine on weekdays.
	// +kubebuilder:validation:Pattern=`^\S+( +\S+){4}$`
	// +kubebuilder:validation:MaxLength=100
	Start string `json:"start"`
	// Duration is how long the window stays open: more than 0s, at most 7d
	// (168h).
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('168h')",message="duration must be more than 0s and at most 168h"
	Duration Duration `json:"duration"`
	// TimeZone is the IANA time zone Start is read in, such as
	// "Europe/Berlin". Default UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
	// MinReplicas is the floor while the window is open.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MinReplicas int32 `json:"minReplicas"`
	// MaxReplicas, when set, is the ceiling while the window is open; it
	// never lifts autoscaling.maxReplicas.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`
}

// Fallback is the count to run while the load index cannot be read.
type Fallback struct {
	// Replicas is the count to run, still within minReplicas and maxReplicas.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	Replicas int32 `json:"replicas"`
}

// MetricSpec is one load index: where to read it, and what values mean.
// +kubebuilder:validation:XValidation:rule="has(self.http) != has(self.prometheus)",message="exactly one of http or prometheus must be set"
// +kubebuilder:validation:XValidation:rule="(has(self.upThreshold) ? quantity(string(self.upThreshold)) : quantity('800m')).isGreaterThan(has(self.downThreshold) ? quantity(string(self.downThreshold)) : quantity('500m'))",message="upThreshold must be greater than downThreshold (defaults 0.8 and 0.5)"
type MetricSpec struct {
	// Name identifies the metric in status and events.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// HTTP reads the load index from a JSON endpoint.
	// +optional
	HTTP *HTTPSource `json:"http,omitempty"`
	// Prometheus reads the load index from an instant query.
	// +optional
	Prometheus *PrometheusSource `json:"prometheus,omitempty"`
	// Role is what the metric measures for the SLO policy: Arrivals or
	// Completions (requests per second), Running or Waiting (requests in
	// the whole pool), or WaitPercentile (seconds). The SLO policy needs
	// Running and one of Arrivals or Completions; each role is given once.
	// Other policies read no roles.
	// +optional
	Role MetricRole `json:"role,omitempty"`

	// UpThreshold: above it, Step adds tasks. Default 0.8. It must be
	// greater than downThreshold.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="upThreshold must not be negative"
	UpThreshold *resource.Quantity `json:"upThreshold,omitempty"`
	// DownThreshold: below it, Step removes tasks. Default 0.5.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="downThreshold must not be negative"
	DownThreshold *resource.Quantity `json:"downThreshold,omitempty"`
	// Target is the value per task that Proportional aims for, above 0.
	// Required by Proportional.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="target must be greater than 0"
	Target *resource.Quantity `json:"target,omitempty"`
}

// HTTPSource reads a load index from a JSON document served over HTTP(S).
type HTTPSource struct {
	// URL of the endpoint, http or https.
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`
	// ValueLocation is the path to the number in the JSON answer: keys and
	// integer array indexes joined by dots, as KEDA's metrics-api scaler
	// reads its plain paths. Default "data.load_balance", for
	// {"data":{"load_balance":0.83}}. "items.0.v" reads index 0 of an
	// array, and "data.gpu\.util" the key "gpu.util" (a backslash escapes a
	// dot). Keys are letters, digits, '_', '-' and ':'. No query language
	// (filters, modifiers, pipes, wildcards) is accepted: the value read
	// must never depend on a string of the answer.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9_:-]|\\\.)+(\.([A-Za-z0-9_:-]|\\\.)+)*$`
	ValueLocation string `json:"valueLocation,omitempty"`
	// Method is GET (the default) or POST. POST is sent only when the
	// controller runs with --load-index-allow-post; otherwise the metric is
	// InvalidMetricSpec.
	// +optional
	// +kubebuilder:validation:Enum=GET;POST
	Method string `json:"method,omitempty"`
	// Timeout of one read: more than 0s, at most 30s. Default 5s. A read never
	// holds the autoscaler's workers; the cap keeps a slow endpoint's reads
	// from piling up.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('30s')",message="timeout must be more than 0s and at most 30s"
	Timeout *Duration `json:"timeout,omitempty"`
	// Headers are sent with each request. Identity and hop-by-hop headers
	// (X-Forwarded-*, Forwarded, X-Real-IP, X-Remote-*, Impersonate-*,
	// Host, Connection, Proxy-*, Te, Trailer, Transfer-Encoding, Upgrade,
	// Keep-Alive) are refused, and Authorization is accepted from a Secret
	// only.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Headers []HTTPHeader `json:"headers,omitempty"`
	// Auth holds the bearer token and TLS settings.
	// +optional
	Auth *SourceAuth `json:"auth,omitempty"`
}

// HTTPHeader is one request header, given inline or from a Secret.
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="exactly one of value or valueFrom must be set"
// +kubebuilder:validation:XValidation:rule="!(self.name.lowerAscii() in ['forwarded', 'x-real-ip', 'host', 'connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'keep-alive']) && !['x-forwarded-', 'x-remote-', 'impersonate-', 'proxy-'].exists(p, self.name.lowerAscii().startsWith(p))",message="identity and hop-by-hop headers (X-Forwarded-*, Forwarded, X-Real-IP, X-Remote-*, Impersonate-*, Host, Connection, Proxy-*, Te, Trailer, Transfer-Encoding, Upgrade, Keep-Alive) may not be set"
// +kubebuilder:validation:XValidation:rule="self.name.lowerAscii() != 'authorization' || has(self.valueFrom)",message="the Authorization header may only come from a Secret (valueFrom)"
type HTTPHeader struct {
	// Name of the header, an HTTP token.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[-!#$%&'*+.^_|~0-9A-Za-z]+$`
	Name string `json:"name"`
	// +optional
	Value *string `json:"value,omitempty"`
	// ValueFrom reads the value from a key of a Secret in the set's namespace.
	// +optional
	ValueFrom *corev1.SecretKeySelector `json:"valueFrom,omitempty"`
}

// PrometheusSource reads a load index from a Prometheus instant query. The
// query must return exactly one finite sample.
type PrometheusSource struct {
	// ServerAddress is the Prometheus base URL, such as http://prometheus.monitoring:9090.
	// +kubebuilder:validation:Pattern=`^https?://`
	ServerAddress string `json:"serverAddress"`
	// Query is a PromQL instant query returning one sample.
	// +kubebuilder:validation:MinLength=1
	Query string `json:"query"`
	// Timeout of one query: more than 0s, at most 30s. Default 5s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('30s')",message="timeout must be more than 0s and at most 30s"
	Timeout *Duration `json:"timeout,omitempty"`
	// Auth holds the bearer token and TLS settings.
	// +optional
	Auth *SourceAuth `json:"auth,omitempty"`
}

// SourceAuth holds the credentials and TLS settings for reading a load index.
// TLS is always verified unless insecureSkipVerify is set.
type SourceAuth struct {
	// BearerTokenSecretRef sends "Authorization: Bearer <token>" with the
	// token read from a key of a Secret in the set's namespace.
	// +optional
	BearerTokenSecretRef *corev1.SecretKeySelector `json:"bearerTokenSecretRef,omitempty"`
	// CASecretRef names a key of a Secret holding PEM CA certificates that
	// the server's certificate is verified against, in place of the system roots.
	// +optional
	CASecretRef *corev1.SecretKeySelector `json:"caSecretRef,omitempty"`
	// InsecureSkipVerify turns off TLS certificate verification. Only for tests.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// GPUTaskSetStatus is what the set controller and the autoscaler last observed.
type GPUTaskSetStatus struct {
	// Replicas is the number of tasks the set owns that are not being deleted.
	// +optional
	Replicas int32 `json:"replicas"`
	// RunningReplicas is the number of those tasks whose phase is Running.
	// +optional
	RunningReplicas int32 `json:"runningReplicas,omitempty"`
	// PendingReplicas is the number of those tasks that wait for a node.
	// +optional
	PendingReplicas int32 `json:"pendingReplicas,omitempty"`
	// ReadyReplicas is the number of those tasks whose Ready condition is True.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// StartingReplicas is the number of tasks the autoscaler counts as
	// starting: not yet Ready and younger than autoscaling.startupTimeout,
	// plus tasks asked for but not created yet.
	// +optional
	StartingReplicas int32 `json:"startingReplicas,omitempty"`
	// QueuedReplicas is the number of tasks of a capacity-aware set whose
	// pods wait for a queueing system's admission (they are gated). They are
	// not counted as starting: quota, not start-up, keeps them waiting.
	// +optional
	QueuedReplicas int32 `json:"queuedReplicas,omitempty"`
	// DrainingReplicas is the number of tasks marked gputask.io/draining,
	// waiting for their work to finish before they are deleted.
	// +optional
	DrainingReplicas int32 `json:"drainingReplicas,omitempty"`
	// HeldBackReplicas is the number of tasks that scale-in wanted to remove
	// but kept because they are younger than minTaskAge.
	// +optional
	HeldBackReplicas int32 `json:"heldBackReplicas,omitempty"`
	// Nodes is the number of distinct nodes that hold the set's tasks: the
	// nodes its tasks that are not being deleted, Failed or Succeeded are
	// bound to. Scale-in empties one node at a time, so that a node
	// autoscaler can remove the nodes it frees.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// Selector is the label selector of the set's tasks and pods, for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`
	// ObservedGeneration is the spec generation the set controller acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LoadIndex is the last load index read, as a decimal. With several
	// metrics it is the value of the one that asked for the most tasks.
	// +optional
	LoadIndex string `json:"loadIndex,omitempty"`
	// DesiredReplicas is the count the autoscaler last computed.
	// +optional
	DesiredReplicas *int32 `json:"desiredReplicas,omitempty"`
	// CapacityReplicas is the most tasks that fit the GPU nodes, when capacityAware.
	// +optional
	CapacityReplicas *int32 `json:"capacityReplicas,omitempty"`
	// LastScaleTime is when the autoscaler last changed replicas. The next
	// change waits until an interval has passed since then, also after a
	// restart or a change of leader.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
	// LastDecision is the autoscaler's last decision and why.
	// +optional
	LastDecision *ScalingDecision `json:"lastDecision,omitempty"`
	// Metrics holds the last reading of each metric.
	// +optional
	// +listType=map
	// +listMapKey=name
	Metrics []MetricStatus `json:"metrics,omitempty"`
	// ConsecutiveFailures counts the reads in a row in which a metric failed.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// Predictive is what predictive pre-warming learned and forecasts.
	// +optional
	Predictive *PredictiveStatus `json:"predictive,omitempty"`
	// BurstUntil, while in the future, is when the current burst ends (see
	// autoscaling.burst); until then the set is not scaled down.
	// +optional
	BurstUntil *metav1.Time `json:"burstUntil,omitempty"`
	// Recommendations are the recent desired counts that the scale-down
	// stabilization window looks back over.
	// +optional
	// +listType=atomic
	Recommendations []Recommendation `json:"recommendations,omitempty"`

	// Conditions are AbleToScale, ScalingActive, ScalingLimited, Fallback,
	// ReplicaFailure, and SpecValid while the spec is invalid.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ScalingDecision records one decision of the autoscaler.
type ScalingDecision struct {
	// Time of the decision.
	Time metav1.Time `json:"time"`
	// Inputs summarizes what the decision saw, such as "load=0.91 up=0.8 down=0.5".
	// +optional
	Inputs string `json:"inputs,omitempty"`
	// From is the count before the decision.
	From int32 `json:"from"`
	// To is the count after the decision.
	To int32 `json:"to"`
	// Reason is a CamelCase word, such as AboveUpThreshold or FailedGetLoadIndex.
	Reason string `json:"reason"`
	// Message explains the decision.
	// +optional
	Message string `json:"message,omitempty"`
	// PredictedWait is, for the SLO policy, the wait at the SLO's
	// percentile that the model predicts with the count chosen, such as
	// "4.2s"; "0s" when fewer requests than the percentile's share wait at
	// all, "unbounded" when the slots cannot keep up. Empty for the other
	// policies and while the service time is unknown.
	// +optional
	PredictedWait string `json:"predictedWait,omitempty"`
	// PredictedTTFT is, for the SLO policy, the time to first token at the
	// SLO's percentile that the model predicts with the count chosen: the
	// predicted wait plus the mean prompt's prefill, such as "1.3s";
	// "unbounded" when the slots cannot keep up. Empty while the service
	// time is unknown.
	// +optional
	PredictedTTFT string `json:"predictedTTFT,omitempty"`
	// PredictedITL is, for the SLO policy with an engine model, the
	// inter-token latency the engine gives at the batch each task runs
	// with the count chosen, such as "18ms". Empty without a model.
	// +optional
	PredictedITL string `json:"predictedITL,omitempty"`
	// BurstHeadroom is, for the SLO policy, the rise of the arrival rate
	// within one start-up, in requests per second, that the pool keeps
	// capacity for; empty until the history of rises is long enough.
	// +optional
	BurstHeadroom string `json:"burstHeadroom,omitempty"`
	// Capacity is, for the SLO policy, how many requests a task serves at
	// once in this decision and where that came from.
	// +optional
	Capacity *TaskCapacity `json:"capacity,omitempty"`
}

// CapacitySource says where the SLO policy's capacity per task came from.
// +kubebuilder:validation:Enum=Override;Profile;Fit;Default
type CapacitySource string

const (
	// CapacityOverride is slo.slotsPerTask.
	CapacityOverride CapacitySource = "Override"
	// CapacityProfile is the engine profile at the ITL objective.
	CapacityProfile CapacitySource = "Profile"
	// CapacityFit is the online fit of ITL = α + β·batch at the ITL objective.
	CapacityFit CapacitySource = "Fit"
	// CapacityDefault is one request a task: no profile, and the fit has
	// too few readings yet.
	CapacityDefault CapacitySource = "Default"
)

// TaskCapacity is how many requests a task serves at once, and why.
type TaskCapacity struct {
	// SlotsPerTask is the capacity the decision used.
	SlotsPerTask int32 `json:"slotsPerTask"`
	// Source is Override, Profile, Fit or Default.
	Source CapacitySource `json:"source"`
	// Context is the mean context of a running sequence, in tokens, that
	// the capacity was read at; empty when unknown.
	// +optional
	Context string `json:"context,omitempty"`
	// Fit is the online fit of the workers' ITL against their running
	// sequences, once it has readings.
	// +optional
	Fit *ITLFitStatus `json:"fit,omitempty"`
}

// ITLFitStatus is the online fit ITL = α + β·batch.
type ITLFitStatus struct {
	// Alpha is the ITL the fit gives at a batch of 0, such as "7.1ms";
	// empty while the readings place no line.
	// +optional
	Alpha string `json:"alpha,omitempty"`
	// Beta is what each more sequence of the batch adds, such as "51µs".
	// +optional
	Beta string `json:"beta,omitempty"`
	// Readings is the weight of the readings the fit holds, older ones
	// counting less; it is used from 5 on.
	Readings string `json:"readings"`
	// LastReadingTime is when the fit last learned: its age.
	LastReadingTime metav1.Time `json:"lastReadingTime"`
}

// MetricStatus is the last reading of one metric.
type MetricStatus struct {
	// Name of the metric.
	Name string `json:"name"`
	// Value is the last value read, as a decimal. Empty if the read failed.
	// +optional
	Value string `json:"value,omitempty"`
	// DesiredReplicas is the count this metric alone asked for.
	// +optional
	DesiredReplicas *int32 `json:"desiredReplicas,omitempty"`
	// Error is why the last read failed.
	// +optional
	Error string `json:"error,omitempty"`
	// LastReadTime is when the metric was last read.
	// +optional
	LastReadTime *metav1.Time `json:"lastReadTime,omitempty"`
}

// Recommendation is one desired count in the stabilization window.
type Recommendation struct {
	Time     metav1.Time `json:"time"`
	Replicas int32       `json:"replicas"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// GPUTaskSetList is a list of GPUTaskSets.
type GPUTaskSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []GPUTaskSet `json:"items"`
}
