package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// karpenterManifests is the directory, next to the binaries, where make
// tools puts the CRDs of the Karpenter release it built.
const karpenterManifests = "karpenter-manifests"

// Well-known labels of Karpenter that its instance types carry.
const (
	KarpenterCapacityTypeLabel = "karpenter.sh/capacity-type"
	KarpenterNodePoolLabel     = "karpenter.sh/nodepool"
	// KarpenterZone is the one zone of the instance types StartKarpenter
	// offers.
	KarpenterZone = "zone-a"
)

// KarpenterInstanceType is an instance type that Karpenter's kwok provider
// may launch: a node of GPUs GPUs (GPUResourceName) and the CPU and memory
// of GPUNodeCapacity, sold on demand at Price an hour.
type KarpenterInstanceType struct {
	Name  string
	GPUs  int
	Price float64
}

// karpenterOffering and karpenterInstanceType are the entries of the kwok
// provider's instance types file (INSTANCE_TYPES_FILE_PATH).
type karpenterOffering struct {
	Price        float64                          `json:"Price"`
	Available    bool                             `json:"Available"`
	Requirements []corev1.NodeSelectorRequirement `json:"Requirements"`
}

type karpenterInstanceType struct {
	Name             string              `json:"name"`
	Offerings        []karpenterOffering `json:"offerings"`
	Architecture     string              `json:"architecture"`
	OperatingSystems []string            `json:"operatingSystems"`
	Resources        corev1.ResourceList `json:"resources"`
}

func karpenterInstanceTypesFile(types []KarpenterInstanceType) ([]byte, error) {
	out := make([]karpenterInstanceType, 0, len(types))
	for _, it := range types {
		resources := GPUNodeCapacity.DeepCopy()
		resources[GPUResourceName] = *resource.NewQuantity(int64(it.GPUs), resource.DecimalSI)
		out = append(out, karpenterInstanceType{
			Name: it.Name,
			Offerings: []karpenterOffering{{
				Price:     it.Price,
				Available: true,
				Requirements: []corev1.NodeSelectorRequirement{
					{Key: KarpenterCapacityTypeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
					{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{KarpenterZone}},
				},
			}},
			Architecture:     "amd64",
			OperatingSystems: []string{"linux"},
			Resources:        resources,
		})
	}
	return json.MarshalIndent(out, "", "  ")
}

// StartKarpenter installs the CRDs of the Karpenter release that make tools
// built (NodePool, NodeClaim, KWOKNodeClass) and starts its kwok provider
// with types as the only instance types. Its nodes are Node objects with no
// kubelet: a NodePool whose template labels them KwokNodeLabel has the
// control plane's kwok make them Ready and run their pods. Leader election
// is off and its metrics and health servers listen on loopback ports. It
// returns once Karpenter reports ready; it stops with the control plane.
func (cp *ControlPlane) StartKarpenter(ctx context.Context, types []KarpenterInstanceType) (*Process, error) {
	if err := CheckBinaries(cp.BinDir, BinKarpenter); err != nil {
		return nil, err
	}
	crds, err := readCRDs(filepath.Join(cp.BinDir, karpenterManifests, "crds"))
	if err != nil {
		return nil, fmt.Errorf("%w: run make tools", err)
	}
	if err := cp.installCRDs(ctx, crds); err != nil {
		return nil, err
	}
	dir := filepath.Join(cp.Dir, "karpenter")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	data, err := karpenterInstanceTypesFile(types)
	if err != nil {
		return nil, err
	}
	typesFile := filepath.Join(dir, "instance-types.json")
	if err := os.WriteFile(typesFile, data, 0o644); err != nil {
		return nil, err
	}
	var p *Process
	err = retryStart(func() (bool, error) {
		metricsPort, healthPort, err := freePort2()
		if err != nil {
			return false, err
		}
		p, err = cp.startProcess(BinKarpenter, []string{
			"KUBECONFIG=" + cp.KubeconfigPath,
			"INSTANCE_TYPES_FILE_PATH=" + typesFile,
			"DISABLE_LEADER_ELECTION=true",
			"METRICS_PORT=" + strconv.Itoa(metricsPort),
			"HEALTH_PROBE_PORT=" + strconv.Itoa(healthPort),
			"LOG_LEVEL=debug",
			"HOME=" + dir,
		})
		if err != nil {
			return false, err
		}
		err = p.waitReady(ctx, componentStartTimeout, func(ctx context.Context) bool {
			body, err := cp.get(ctx, "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/readyz")
			return err == nil && strings.TrimSpace(body) == "ok"
		})
		if err != nil {
			p.Stop()
			return p.Exited(), err
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}
