package main

import (
	"fmt"

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
type clientBuilder struct {
	config *rest.Config
}

// clientsFor returns new clients for the user name.
func (b clientBuilder) clientsFor(name string) (clients, error) {
	config := rest.AddUserAgent(rest.CopyConfig(b.config), controllerAgentName+"/"+name)
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return clients{}, fmt.Errorf("building kubernetes clientset for %s: %w", name, err)
	}
	gputask, err := versioned.NewForConfig(config)
	if err != nil {
		return clients{}, fmt.Errorf("building gputask clientset for %s: %w", name, err)
	}
	return clients{kube: kube, gputask: gputask}, nil
}
