package autoscaler

import (
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	componentmetrics "k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

// enqueue adds the set's key to the queue.
func (c *Controller) enqueue(set *gputaskv1.GPUTaskSet) {
	c.workqueue.Add(cache.MetaObjectToName(set))
}

func (c *Controller) addSet(logger klog.Logger, obj any) {
	set, ok := obj.(*gputaskv1.GPUTaskSet)
	if !ok || set.Spec.Autoscaling == nil {
		return
	}
	logger.V(4).Info("GPUTaskSet added", "gputaskset", klog.KObj(set))
	c.enqueue(set)
}

// updateSet evaluates at once only when the user changed what the
// autoscaler does. Replicas changes (ours included) and status writes wait
// for the next interval: re-reading a load index that has not yet reacted to
// a scale-up would only scale up again.
func (c *Controller) updateSet(logger klog.Logger, old, cur any) {
	oldSet, ok1 := old.(*gputaskv1.GPUTaskSet)
	newSet, ok2 := cur.(*gputaskv1.GPUTaskSet)
	if !ok1 || !ok2 || newSet.Spec.Autoscaling == nil {
		return
	}
	if oldSet.Spec.Autoscaling == nil ||
		!apiequality.Semantic.DeepEqual(oldSet.Spec.Autoscaling, newSet.Spec.Autoscaling) ||
		gputaskv1.IsPaused(oldSet) != gputaskv1.IsPaused(newSet) || gputaskv1.IsStopped(oldSet) != gputaskv1.IsStopped(newSet) {
		logger.V(4).Info("GPUTaskSet autoscaling changed", "gputaskset", klog.KObj(newSet))
		c.enqueue(newSet)
	}
}

func (c *Controller) deleteSet(logger klog.Logger, obj any) {
	set, ok := tombstone.Unwrap[*gputaskv1.GPUTaskSet](obj)
	if !ok {
		return
	}
	logger.V(4).Info("GPUTaskSet deleted", "gputaskset", klog.KObj(set))
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

// profileChanged evaluates at once the sets of the ConfigMap's namespace
// that read their engine profile from it: one that held its count for a
// missing or bad profile need not wait out its interval once the profile
// is fixed. A resync (same version) changes nothing and enqueues nothing.
func (c *Controller) profileChanged(logger klog.Logger, old, cur any) {
	cm, ok := tombstone.Unwrap[*corev1.ConfigMap](cur)
	if !ok {
		return
	}
	if prev, ok := old.(*corev1.ConfigMap); ok && prev.ResourceVersion == cm.ResourceVersion {
		return
	}
	sets, err := c.setsLister.GPUTaskSets(cm.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, set := range sets {
		if refersTo(set, cm.Name) {
			logger.V(4).Info("Engine profile changed", "gputaskset", klog.KObj(set), "configMap", klog.KObj(cm))
			c.enqueue(set)
		}
	}
}

// refersTo is whether the set reads its engine profile from the
// ConfigMap of its namespace named name.
func refersTo(set *gputaskv1.GPUTaskSet, name string) bool {
	as := set.Spec.Autoscaling
	if as == nil || as.Policy.SLO == nil || as.Policy.SLO.Engine == nil || as.Policy.SLO.Engine.ConfigMapRef == nil {
		return false
	}
	return as.Policy.SLO.Engine.ConfigMapRef.Name == name
}
