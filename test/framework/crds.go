package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

const crdTimeout = 60 * time.Second

// InstallCRDs creates or updates every CRD in artifacts/crds, then waits until
// each is Established and discovery serves its resources, so that a client
// (kubectl, an informer) started right after finds them.
func (cp *ControlPlane) InstallCRDs(ctx context.Context) error {
	crds, err := readCRDs(filepath.Join(cp.Root, "artifacts", "crds"))
	if err != nil {
		return err
	}
	return cp.installCRDs(ctx, crds)
}

// InstallCRDsFrom is InstallCRDs for the CRDs in dir, such as a chart's
// crds/. Each CRD's spec is replaced as a whole, so that a field its
// schema lacks is gone, as an older release would have it.
func (cp *ControlPlane) InstallCRDsFrom(ctx context.Context, dir string) error {
	crds, err := readCRDs(dir)
	if err != nil {
		return err
	}
	return cp.installCRDs(ctx, crds)
}

// installCRDs creates or updates crds and waits until each is served.
func (cp *ControlPlane) installCRDs(ctx context.Context, crds []*apiextensionsv1.CustomResourceDefinition) error {
	for _, crd := range crds {
		if err := cp.applyCRD(ctx, crd); err != nil {
			return err
		}
	}
	for _, crd := range crds {
		if err := cp.waitCRDServed(ctx, crd); err != nil {
			return err
		}
	}
	return nil
}

func readCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("listing CRDs in %s: %w", dir, err)
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(paths))
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading CRD: %w", err)
		}
		// The directory also holds a kustomization; only CRDs are wanted.
		var typeMeta metav1.TypeMeta
		if err := yaml.Unmarshal(data, &typeMeta); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		if typeMeta.Kind != "CustomResourceDefinition" {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decoding CRD %s: %w", path, err)
		}
		crds = append(crds, crd)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", dir)
	}
	return crds, nil
}

func (cp *ControlPlane) applyCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	client := cp.APIExtensions.ApiextensionsV1().CustomResourceDefinitions()
	_, err := client.Create(ctx, crd, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		return nil
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := client.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		current.Spec = crd.Spec
		_, err = client.Update(ctx, current, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("updating CRD %s: %w", crd.Name, err)
	}
	return nil
}

func (cp *ControlPlane) waitCRDServed(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	client := cp.APIExtensions.ApiextensionsV1().CustomResourceDefinitions()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, crdTimeout, true, func(ctx context.Context) (bool, error) {
		current, err := client.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if !crdEstablished(current) {
			return false, nil
		}
		for _, version := range current.Spec.Versions {
			if !version.Served {
				continue
			}
			gv := current.Spec.Group + "/" + version.Name
			list, err := cp.Kube.Discovery().ServerResourcesForGroupVersion(gv)
			if err != nil {
				return false, nil
			}
			if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool {
				return r.Name == current.Spec.Names.Plural
			}) {
				return false, nil
			}
			if !cp.openAPIHasKind(gv, current.Spec.Names.Kind) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be served: %w", crd.Name, err)
	}
	return nil
}

// openAPIHasKind reports whether the OpenAPI v3 document of gv describes
// kind. The apiserver publishes it a moment after discovery, and kubectl
// explain (and server-side field validation in kubectl) read it.
func (cp *ControlPlane) openAPIHasKind(gv, kind string) bool {
	paths, err := cp.Kube.Discovery().OpenAPIV3().Paths()
	if err != nil {
		return false
	}
	doc, ok := paths["apis/"+gv]
	if !ok {
		return false
	}
	schema, err := doc.Schema("application/json")
	if err != nil {
		return false
	}
	return bytes.Contains(schema, []byte(`"kind":"`+kind+`"`))
}

func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
