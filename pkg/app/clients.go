package app

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
)

// Clients are one user's API clients.
type Clients struct {
	Kube    kubernetes.Interface
	GPUTask versioned.Interface
	// Dynamic reads kinds the project does not build against (Kueue's).
	Dynamic dynamic.Interface
}

// ClientBuilder gives each user of the API, a controller, the informers or
// the leader election, clients of its own, as kube-controller-manager's
// ClientBuilder does. Each clientset builds its own token bucket from the
// config's QPS and burst, so the pod creates of one controller never wait
// behind the status writes of another, nor the lease renewals behind either.
// The user agent ends in the user's name, so the API server's logs and
// metrics tell them apart.
//
// Kubernetes' own kinds travel as protobuf by default, as in
// kube-controller-manager: decoding the watch events of many pods costs
// several times less CPU than JSON. Custom resources have no protobuf
// encoding, so the gputask clientset keeps JSON.
type ClientBuilder struct {
	Config *rest.Config
	// KubeContentType is the content type of the kubernetes clientset;
	// empty means JSON.
	KubeContentType string
}

// ClientsFor returns new clients for the user name, a controller's identity.
func (b ClientBuilder) ClientsFor(name string) (Clients, error) {
	config := rest.AddUserAgent(rest.CopyConfig(b.Config), name)
	kubeConfig := rest.CopyConfig(config)
	if b.KubeContentType != "" && b.KubeContentType != runtime.ContentTypeJSON {
		kubeConfig.ContentType = b.KubeContentType
		kubeConfig.AcceptContentTypes = b.KubeContentType + "," + runtime.ContentTypeJSON
	}
	kube, err := kubernetes.NewForConfig(kubeConfig)
	if err != nil {
		return Clients{}, fmt.Errorf("building kubernetes clientset for %s: %w", name, err)
	}
	gputask, err := versioned.NewForConfig(config)
	if err != nil {
		return Clients{}, fmt.Errorf("building gputask clientset for %s: %w", name, err)
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return Clients{}, fmt.Errorf("building dynamic client for %s: %w", name, err)
	}
	return Clients{Kube: kube, GPUTask: gputask, Dynamic: dyn}, nil
}
