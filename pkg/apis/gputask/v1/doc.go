// Package v1 is version v1 of the gputask.io API: GPUTask, one unit of GPU work
// run as exactly one Pod, and GPUTaskSet, a pool of identical GPUTasks scaled by
// a load index.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=com.github.gputask.gputask-controller.pkg.apis.gputask.v1
// +groupName=gputask.io
package v1
