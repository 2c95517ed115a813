package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
)

// clients are one user's API clients.
type clients struct {
	kube    kubernetes.Interface
	gputask versioned.Interface
}

// clientBuilder gives each user of the API, a controller, the informers or
// the leader election, clients of its own, as kube-controller-manager's
// ClientBuilder does. Each clientset builds its own token bucket from the
// config's QPS and burst, so the pod creates of one controller never wait
// behind the status writes of another, nor the lease renewals behind either.
// The user agent names the user, so the API server's logs and metrics tell
// them apart.
//
// Kubernetes' own kinds travel as protobuf by default, as in
// kube-controller-manager: decoding the watch events of many pods costs
// several times less CPU than JSON. Custom resources have no protobuf
// encoding, so the gputask clientset keeps JSON.
type clientBuilder struct {
	config *rest.Config
	// kubeContentType is the content type of the kubernetes clientset;
	// empty means JSON.
	kubeContentType string
}

// clientsFor returns new clients for the user name.
func (b clientBuilder) clientsFor(name string) (clients, error) {
	config := rest.AddUserAgent(rest.CopyConfig(b.config), controllerAgentName+"/"+name)
	kubeConfig := rest.CopyConfig(config)
	if b.kubeContentType != "" && b.kubeContentType != runtime.ContentTypeJSON {
		kubeConfig.ContentType = b.kubeContentType
		kubeConfig.AcceptContentTypes = b.kubeContentType + "," + runtime.ContentTypeJSON
	}
	kube, err := kubernetes.NewForConfig(kubeConfig)
	if err != nil {
		return clients{}, fmt.Errorf("building kubernetes clientset for %s: %w", name, err)
	}
	gputask, err := versioned.NewForConfig(config)
	if err != nil {
		return clients{}, fmt.Errorf("building gputask clientset for %s: %w", name, err)
	}
	return clients{kube: kube, gputask: gputask}, nil
}
