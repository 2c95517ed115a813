// Package gputask holds the API group name shared by every version.
package gputask

// GroupName is the API group of GPUTask and GPUTaskSet.
const GroupName = "gputask.io"
