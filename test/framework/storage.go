package framework

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// StoreUnvalidated writes a custom resource straight into etcd, where the
// API server keeps it, as an older version of its CRD would have let it
// in: no schema, rule or admission check sees it, and the API server and
// the controllers' watches then serve it like any other. It is how a test
// puts an object the CRD now refuses next to valid ones on a shared
// control plane, without swapping the CRD under the other tests.
//
// obj must carry apiVersion, kind, metadata.name and metadata.namespace;
// the uid and creation time are set here, as the API server sets them.
func (cp *ControlPlane) StoreUnvalidated(ctx context.Context, group, resource string, obj map[string]any) error {
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	namespace, _ := meta["namespace"].(string)
	if name == "" || namespace == "" {
		return fmt.Errorf("storing %s.%s: metadata.name and metadata.namespace are required", resource, group)
	}
	meta["uid"] = string(uuid.NewUUID())
	meta["creationTimestamp"] = metav1.NewTime(time.Now()).UTC().Format(time.RFC3339)
	meta["generation"] = 1
	value, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding %s.%s %s/%s: %w", resource, group, namespace, name, err)
	}
	// The API server's default etcd prefix, then the CRD's group and plural.
	key := fmt.Sprintf("/registry/%s/%s/%s/%s", group, resource, namespace, name)
	// etcd's JSON gateway takes keys and values in base64.
	body, err := json.Marshal(map[string]string{
		"key":   base64.StdEncoding.EncodeToString([]byte(key)),
		"value": base64.StdEncoding.EncodeToString(value),
	})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cp.EtcdURL+"/v3/kv/put", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("storing %s: %w", key, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<12))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("storing %s: %s: %s", key, resp.Status, answer)
	}
	return nil
}
