// Package client is the guide to using the gputask.io API from Go. It holds no
// code of its own: its examples show the generated packages at work, and they
// run as tests against the generated fake clientset, so they stay correct.
//
// The packages to import:
//
//	github.com/gputask/gputask-controller/pkg/apis/gputask/v1                        the types: GPUTask, GPUTaskSet
//	github.com/gputask/gputask-controller/pkg/generated/clientset/versioned          the typed clientset
//	github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/fake     its fake, for tests (NewClientset)
//	github.com/gputask/gputask-controller/pkg/generated/informers/externalversions   shared informers
//	github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1           listers
//	github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1 apply configurations
//
// A program builds one clientset from a rest.Config (Example_connect) and
// shares it; it creates tasks and sets with Create (Example_createTask,
// Example_createTaskSet) or declares them with server-side apply
// (Example_serverSideApply), and watches them through a shared informer
// rather than polling (Example_waitForRunning).
//
// GPUTaskSet status has two writers, the set controller and the autoscaler,
// each applying only its own fields under its own field manager. A program
// that adds status of its own does the same: Example_applyStatus shows that
// two managers' fields coexist and that neither apply removes the other's.
//
// In tests, fake.NewClientset tracks managed fields for the gputask.io kinds
// (the apply configurations carry their OpenAPI schema), so Apply, ApplyStatus
// and field ownership behave as on an API server, conflicts included. It does
// not run the CRD's validation, defaulting or admission policies; test those on
// a real API server (test/integration). TestUserCode in this package is a
// model for testing one's own code against the fake.
//
// docs/client-go.md walks through the same steps.
package client
