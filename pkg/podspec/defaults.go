package podspec

import corev1 "k8s.io/api/core/v1"

// Defaults that mirror the NVIDIA GPU ecosystem; each is a controller flag.
const (
	// DefaultGPUResourceName is the extended resource of the NVIDIA device plugin.
	DefaultGPUResourceName corev1.ResourceName = "nvidia.com/gpu"
	// DefaultGPULabelKey is the node label that GPU Feature Discovery sets to the GPU model.
	DefaultGPULabelKey = "nvidia.com/gpu.product"
	// DefaultImage runs a task that names no image.
	DefaultImage = "busybox:1.36"
)
