package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Well-known labels and annotations.
const (
	// LabelTask is set on every Pod that a GPUTask runs, with the task's name as value.
	LabelTask = "gputask.io/task"
	// LabelEngineProfile, "true" on a ConfigMap, lets GPUTaskSets of its
	// namespace read an engine profile from it (slo.engine.configMapRef):
	// the controller caches only such ConfigMaps.
	LabelEngineProfile = "gputask.io/engine-profile"
	// LabelTaskSet is set on every GPUTask that a GPUTaskSet owns, and on its Pod,
	// with the set's name as value.
	LabelTaskSet = "gputask.io/taskset"

	// AnnotationPaused on a GPUTaskSet stops its autoscaler from acting ("true").
	AnnotationPaused = "gputask.io/paused"
	// AnnotationStopped on a GPUTaskSet scales it to zero tasks while keeping
	// spec.replicas and the autoscaling settings; removing it starts the set again.
	AnnotationStopped = "gputask.io/stopped"
	// AnnotationRestartedAt on a GPUTaskSet or a GPUTask asks for the pods to be
	// recreated. A pod created before this RFC 3339 time is replaced, one at a time.
	AnnotationRestartedAt = "gputask.io/restartedAt"
	// AnnotationDeletionCost on a GPUTask ranks it for scale-in: lower goes first.
	// It mirrors controller.kubernetes.io/pod-deletion-cost.
	AnnotationDeletionCost = "gputask.io/deletion-cost"
	// AnnotationLoadIndexAccess on a Secret lets GPUTaskSets in the Secret's
	// namespace use it for a load-index source: a comma-separated list of set
	// names, or "*" for every set. The controller refuses a Secret without it,
	// so that a set can never send a Secret its author chose but its owner
	// did not.
	AnnotationLoadIndexAccess = "gputask.io/load-index-access"
	// AnnotationBusy on a GPUTask or its Pod ("true") says that the worker is
	// in the middle of work. Scale-in prefers idle tasks and drains busy ones.
	// The worker sets and clears it, as applications set
	// controller.kubernetes.io/pod-deletion-cost.
	AnnotationBusy = "gputask.io/busy"
	// AnnotationDraining ("true") is set by the set controller on a task that
	// scale-in chose while it was busy, and on its Pod, so that the worker can
	// read it through the downward API and stop taking new work. The task is
	// deleted once it is no longer busy or after scaleIn.drainTimeout.
	AnnotationDraining = "gputask.io/draining"
	// AnnotationDrainStartedAt is the RFC 3339 time at which the set
	// controller marked the task draining; drainTimeout counts from it.
	AnnotationDrainStartedAt = "gputask.io/drainStartedAt"
)

// GPUTaskPhase is where a GPUTask's pod is in its life.
// +kubebuilder:validation:Enum=Pending;Scheduled;Running;Succeeded;Failed
type GPUTaskPhase string

const (
	// GPUTaskPending: the pod does not exist yet or waits for a node.
	GPUTaskPending GPUTaskPhase = "Pending"
	// GPUTaskScheduled: the pod is bound to a node and its containers are starting.
	GPUTaskScheduled GPUTaskPhase = "Scheduled"
	// GPUTaskRunning: the pod runs.
	GPUTaskRunning GPUTaskPhase = "Running"
	// GPUTaskSucceeded: the pod's containers exited with 0.
	GPUTaskSucceeded GPUTaskPhase = "Succeeded"
	// GPUTaskFailed: the pod's containers failed.
	GPUTaskFailed GPUTaskPhase = "Failed"
)

// ReschedulePolicy says when the controller places a task's pod again.
// +kubebuilder:validation:Enum=Never;OnFailure;Periodic
type ReschedulePolicy string

const (
	// RescheduleNever leaves a failed or lost pod as it is.
	RescheduleNever ReschedulePolicy = "Never"
	// RescheduleOnFailure recreates a pod that failed, was evicted, lost its node
	// or stayed unschedulable past the pending timeout.
	RescheduleOnFailure ReschedulePolicy = "OnFailure"
	// ReschedulePeriodic does what OnFailure does and also places the pod again
	// every reschedule interval, so the scheduler can pick a better node.
	ReschedulePeriodic ReschedulePolicy = "Periodic"
)

// GPUTask condition types.
const (
	// ConditionSpecValid is False with reason InvalidSpec when the spec cannot be
	// turned into a pod; the message names the field. A GPUTaskSet has it,
	// False, only while its spec fails the CRD's rules (an object stored
	// before them); the set is then not autoscaled.
	ConditionSpecValid = "SpecValid"
	// ConditionPodOwned is False with reason PodConflict when a pod with the
	// task's name exists that the task does not control.
	ConditionPodOwned = "PodOwned"
	// ConditionScheduled mirrors the pod's PodScheduled condition, including the
	// scheduler's reason when the pod does not fit anywhere.
	ConditionScheduled = "Scheduled"
	// ConditionReady mirrors the pod's Ready condition.
	ConditionReady = "Ready"
	// ConditionPodUpToDate is False with reason SpecChanged when the running pod
	// no longer matches the pod the spec asks for; the message names the first
	// field that differs. The pod is replaced only when gputask.io/restartedAt
	// asks for it.
	ConditionPodUpToDate = "PodUpToDate"
	// ConditionPodCreateFailed is True while the API server refuses the task's
	// pod (reason Invalid or Forbidden, with the API's message); it goes away
	// once a pod is created.
	ConditionPodCreateFailed = "PodCreateFailed"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=gt,categories=gpu
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="GPU",type=string,JSONPath=`.spec.gpu`
// +kubebuilder:printcolumn:name="AMOUNT",type=string,JSONPath=`.spec.gpu-amount`
// +kubebuilder:printcolumn:name="PHASE",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="NODE",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="SCHEDULED",type=string,JSONPath=`.status.conditions[?(@.type=="Scheduled")].reason`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="name must be at most 63 characters: it is the value of the pod's gputask.io/task label"

// GPUTask is one unit of GPU work. The controller runs it as exactly one Pod
// that asks for spec.gpu-amount GPUs of model spec.gpu, and mirrors the pod's
// fate in status.
type GPUTask struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the GPU work to run.
	// +required
	Spec GPUTaskSpec `json:"spec"`
	// Status is what the controller last observed of the task's pod.
	// +optional
	Status GPUTaskStatus `json:"status,omitempty"`
}

// GPUTaskSpec describes the GPU work and the pod that runs it.
// +kubebuilder:validation:XValidation:rule="!has(self.gpuAlternatives) || size(self.gpuAlternatives) == 0 || (has(self.gpu) && size(self.gpu) > 0)",message="gpuAlternatives needs gpu: the alternatives are accepted in addition to it"
// +kubebuilder:validation:XValidation:rule="!has(self.gpuAlternatives) || !has(self.gpu) || !(self.gpu in self.gpuAlternatives)",message="gpuAlternatives must not repeat gpu"
type GPUTaskSpec struct {
	// GPU is the GPU model, such as "NVIDIA-A100-SXM4-80GB". The pod only runs on
	// nodes whose GPU model label (nvidia.com/gpu.product by default) has this
	// value; in DRA mode, only on devices whose model attribute has it, which
	// may contain spaces ("NVIDIA A100-SXM4-80GB"). Empty means any GPU.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_. ]*)?[A-Za-z0-9])?$`
	GPU string `json:"gpu,omitempty"`

	// GPUAlternatives are other GPU models the task accepts, in order of
	// preference after gpu. With them the pod requires the GPU model label to be
	// gpu or one of these, and prefers them in the order given.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^([A-Za-z0-9][-A-Za-z0-9_. ]*)?[A-Za-z0-9]$`
	GPUAlternatives []string `json:"gpuAlternatives,omitempty"`

	// GPUAllocation is how the pod asks for its GPUs: ExtendedResource (a
	// limit on the controller's --gpu-resource-name, placed by the node's
	// GPU model label) or DRA (a ResourceClaim of exactly gpu-amount devices
	// of the controller's --dra-device-class, with gpu and gpuAlternatives
	// as CEL selectors on the device's model attribute, the alternatives as
	// a firstAvailable list). Empty means the controller's --gpu-allocation.
	// +optional
	// +kubebuilder:validation:Enum=ExtendedResource;DRA
	GPUAllocation GPUAllocationMode `json:"gpuAllocation,omitempty"`

	// DeviceSelectors are further CEL expressions that each device must
	// match in DRA mode, such as
	// device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=10240
	// +kubebuilder:validation:items:MinLength=1
	DeviceSelectors []string `json:"deviceSelectors,omitempty"`

	// GPUAmount is how many GPUs the pod asks for, an integer of at least 1,
	// written as 2 or "2". It becomes the pod's limit on the GPU resource
	// (nvidia.com/gpu by default).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:Pattern=`^([1-9][0-9]{0,2}|10[01][0-9]|102[0-4])$`
	// +kubebuilder:validation:XValidation:rule="type(self) != int || (self >= 1 && self <= 1024)",message="gpu-amount must be an integer from 1 to 1024"
	GPUAmount *intstr.IntOrString `json:"gpu-amount,omitempty"`

	// CPU is the pod's CPU request and limit, a Kubernetes quantity such as 2,
	// "2" or "500m".
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:Pattern=`^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self > 0 : (isQuantity(self) && quantity(self).isGreaterThan(quantity('0')))",message="must be a positive quantity"
	CPU *intstr.IntOrString `json:"cpu,omitempty"`

	// Memory is the pod's memory request and limit, a Kubernetes quantity such
	// as "16Gi".
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:Pattern=`^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self > 0 : (isQuantity(self) && quantity(self).isGreaterThan(quantity('0')))",message="must be a positive quantity"
	Memory *intstr.IntOrString `json:"memory,omitempty"`

	// Priority is the name of a PriorityClass for the pod.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Priority string `json:"priority,omitempty"`

	// Image is the container image. Empty means the controller's --default-image.
	// +optional
	Image string `json:"image,omitempty"`
	// Command overrides the image's entrypoint.
	// +optional
	// +listType=atomic
	Command []string `json:"command,omitempty"`
	// Args are the arguments to the entrypoint.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`
	// Env is the container's environment.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`

	// ReschedulePolicy says when the controller places the pod again: Never,
	// OnFailure (the default: after a failure, an eviction, a lost node or a long
	// unschedulable wait) or Periodic (also every reschedule interval).
	// +optional
	// +kubebuilder:default=OnFailure
	ReschedulePolicy ReschedulePolicy `json:"reschedulePolicy,omitempty"`

	// Template is the pod to run, as in a Deployment: labels, annotations and a
	// full PodSpec. The fields above apply to its main container (the one named
	// "task", else the only one, else the first); a field set both above and in
	// the template to different values is an invalid spec. The controller owns
	// the pod's name, owner reference, gputask.io labels, GPU limit and GPU-model
	// placement.
	// +optional
	Template *PodTemplate `json:"template,omitempty"`
}

// PodTemplate is the pod a GPUTask runs, before the controller adds what it owns.
type PodTemplate struct {
	// Metadata holds the pod's labels and annotations, such as a Kueue queue name.
	// +optional
	Metadata PodTemplateMeta `json:"metadata,omitempty"`
	// Spec is the pod's spec. containers may be left out: the controller then
	// adds the main container "task".
	// +optional
	Spec corev1.PodSpec `json:"spec,omitempty"`
}

// PodTemplateMeta holds the labels and annotations given to a task's pod.
type PodTemplateMeta struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// GPUAllocationMode is how a task's pod asks for GPUs.
type GPUAllocationMode string

const (
	// GPUAllocationExtendedResource asks for an extended resource, such as
	// nvidia.com/gpu, and places the pod by the node's GPU model label.
	GPUAllocationExtendedResource GPUAllocationMode = "ExtendedResource"
	// GPUAllocationDRA asks for devices through Dynamic Resource Allocation.
	GPUAllocationDRA GPUAllocationMode = "DRA"
)

// GPUTaskStatus is what the controller last observed of the task's pod.
type GPUTaskStatus struct {
	// Phase is the task's phase, derived from its pod.
	// +optional
	Phase GPUTaskPhase `json:"phase,omitempty"`
	// PodName is the name of the task's pod.
	// +optional
	PodName string `json:"podName,omitempty"`
	// NodeName is the node the pod is bound to.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// GPUModel is the GPU model the pod got, so a task with
	// gpuAlternatives shows which: the node's GPU model label, or in DRA
	// mode the model of the firstAvailable entry its claim was allocated.
	// +optional
	GPUModel string `json:"gpuModel,omitempty"`
	// Devices are the devices allocated to the pod's GPU claim in DRA mode,
	// as driver/pool/device.
	// +optional
	// +listType=atomic
	Devices []string `json:"devices,omitempty"`
	// Reschedules counts how often the controller has replaced the pod.
	// +optional
	Reschedules int32 `json:"reschedules,omitempty"`
	// LastRescheduleTime is when the pod was last replaced.
	// +optional
	LastRescheduleTime *metav1.Time `json:"lastRescheduleTime,omitempty"`
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are SpecValid, PodOwned, Scheduled, Ready and PodUpToDate.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// GPUTaskList is a list of GPUTasks.
type GPUTaskList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []GPUTask `json:"items"`
}
