package autoscaler

import (
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
	componentmetrics "k8s.io/component-base/metrics"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

func (c *Controller) onSetAdd(obj any) {
	set, ok := obj.(*gputaskv1.GPUTaskSet)
	if !ok || set.Spec.Autoscaling == nil {
		return
	}
	c.workqueue.Add(cache.MetaObjectToName(set))
}

// onSetUpdate evaluates at once only when the user changed what the
// autoscaler does. Replicas changes (ours included) and status writes wait
// for the next interval: re-reading a load index that has not yet reacted to
// a scale-up would only scale up again.
func (c *Controller) onSetUpdate(oldObj, newObj any) {
	oldSet, ok1 := oldObj.(*gputaskv1.GPUTaskSet)
	newSet, ok2 := newObj.(*gputaskv1.GPUTaskSet)
	if !ok1 || !ok2 || newSet.Spec.Autoscaling == nil {
		return
	}
	if oldSet.Spec.Autoscaling == nil ||
		!apiequality.Semantic.DeepEqual(oldSet.Spec.Autoscaling, newSet.Spec.Autoscaling) ||
		gputaskv1.IsPaused(oldSet) != gputaskv1.IsPaused(newSet) || gputaskv1.IsStopped(oldSet) != gputaskv1.IsStopped(newSet) {
		c.workqueue.Add(cache.MetaObjectToName(newSet))
	}
}

func (c *Controller) onSetDelete(obj any) {
	set, ok := tombstone.Unwrap[*gputaskv1.GPUTaskSet](obj)
	if !ok {
		return
	}
	key := cache.MetaObjectToName(set)
	c.forget(key)
	c.workqueue.Forget(key)
}

// forget drops a set's cached sources and its metric series.
func (c *Controller) forget(key cache.ObjectName) {
	c.mu.Lock()
	delete(c.sets, key)
	c.mu.Unlock()
	labels := map[string]string{"namespace": key.Namespace, "taskset": key.Name}
	// DeletePartialMatch comes from the embedded Prometheus vector, which
	// does not exist until the metric is registered.
	for _, vec := range []*componentmetrics.GaugeVec{metrics.LoadIndex, metrics.DesiredReplicas} {
		if vec.IsCreated() {
			vec.DeletePartialMatch(labels)
		}
	}
	for _, vec := range []*componentmetrics.CounterVec{metrics.ScalingDecisions, metrics.LoadIndexErrors} {
		if vec.IsCreated() {
			vec.DeletePartialMatch(labels)
		}
	}
}
