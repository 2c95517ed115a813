package client_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	applyv1 "github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/fake"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
)

// A program builds one clientset from a kubeconfig, or from the pod's service
// account with rest.InClusterConfig, and shares it. The clientset is safe for
// concurrent use. The other examples use the fake clientset in its place:
// both implement versioned.Interface.
func Example_connect() {
	kubeconfig := flag.String("kubeconfig", clientcmd.RecommendedHomeFile, "path to a kubeconfig")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Name the program, as the controllers do: the API server's audit log
	// and metrics then tell its requests apart.
	cfg.UserAgent = "render-pipeline"
	var clientset versioned.Interface
	clientset, err = versioned.NewForConfig(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	tasks, err := clientset.GputaskV1().GPUTasks("team-a").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(tasks.Items), "tasks")
}

// A GPUTask runs one pod with the GPUs it asks for. spec.gpu is the GPU model
// (a node label, nvidia.com/gpu.product by default) and spec.gpu-amount how
// many GPUs of it. Create fails with AlreadyExists when the name is taken.
func Example_createTask() {
	ctx := context.Background()
	clientset := fake.NewClientset() // versioned.NewForConfig(cfg) in a program

	task := &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: "render-1", Namespace: "team-a"},
		Spec: gputaskv1.GPUTaskSpec{
			GPU:             "NVIDIA-A100-SXM4-80GB",
			GPUAlternatives: []string{"NVIDIA-H100-80GB-HBM3"},
			GPUAmount:       ptr.To(intstr.FromInt32(2)),
			Memory:          ptr.To(intstr.FromString("64Gi")),
			Image:           "registry.example/render:1.4",
			Args:            []string{"--scene=intro"},
		},
	}
	created, err := clientset.GputaskV1().GPUTasks("team-a").Create(ctx, task, metav1.CreateOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("created %s/%s: %s x %s\n", created.Namespace, created.Name, created.Spec.GPUAmount, created.Spec.GPU)

	_, err = clientset.GputaskV1().GPUTasks("team-a").Create(ctx, task, metav1.CreateOptions{})
	fmt.Println("second create: already exists:", apierrors.IsAlreadyExists(err))
	// Output:
	// created team-a/render-1: 2 x NVIDIA-A100-SXM4-80GB
	// second create: already exists: true
}

// A GPUTaskSet keeps spec.replicas tasks made from its template. With
// spec.autoscaling, the autoscaler sets spec.replicas from a load index: here
// one step up above 0.8 and one step down below 0.3 of a backend's
// {"data": {"load_balance": 0.83}}, between 1 and 8 tasks.
func Example_createTaskSet() {
	ctx := context.Background()
	clientset := fake.NewClientset()

	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "render", Namespace: "team-a"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](2),
			Template: gputaskv1.GPUTaskTemplateSpec{
				Spec: gputaskv1.GPUTaskSpec{
					GPU:       "NVIDIA-A100-SXM4-80GB",
					GPUAmount: ptr.To(intstr.FromInt32(1)),
					Image:     "registry.example/render:1.4",
				},
			},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas:    ptr.To[int32](1),
				MaxReplicas:    8,
				Interval:       &gputaskv1.Duration{Duration: 30 * time.Second},
				StartupTimeout: &gputaskv1.Duration{Duration: 10 * time.Minute},
				Metrics: []gputaskv1.MetricSpec{{
					Name: "load",
					HTTP: &gputaskv1.HTTPSource{
						URL:           "https://render-backend.team-a.svc/load",
						ValueLocation: "data.load_balance",
					},
					UpThreshold:   ptr.To(resource.MustParse("0.8")),
					DownThreshold: ptr.To(resource.MustParse("0.3")),
				}},
				Policy: gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy},
			},
		},
	}
	created, err := clientset.GputaskV1().GPUTaskSets("team-a").Create(ctx, set, metav1.CreateOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	as := created.Spec.Autoscaling
	fmt.Printf("%s: %d tasks now, %d to %d by %s every %s\n", created.Name,
		*created.Spec.Replicas, *as.MinReplicas, as.MaxReplicas, as.Metrics[0].Name, as.Interval)
	// Output:
	// render: 2 tasks now, 1 to 8 by load every 30s
}

// To wait for a task, watch it through a shared informer instead of polling
// Get: the informer lists once, then follows a watch, and its handlers see
// every change. Here the example plays the controller's part and marks the
// task Running; on a cluster the GPUTask controller does that when the pod
// is Ready.
func Example_waitForRunning() {
	clientset := fake.NewClientset(&gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: "render-1", Namespace: "team-a"},
		Spec:       gputaskv1.GPUTaskSpec{GPU: "NVIDIA-A100-SXM4-80GB", Image: "registry.example/render:1.4"},
	})

	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace("team-a"))
	// Shutdown waits for the informers, which stop when ctx is done: defer
	// it first so that it runs after cancel.
	defer factory.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tasks := factory.Gputask().V1().GPUTasks()
	running := make(chan *gputaskv1.GPUTask, 1)
	notify := func(obj any) {
		if task, ok := obj.(*gputaskv1.GPUTask); ok && task.Name == "render-1" && task.Status.Phase == gputaskv1.GPUTaskRunning {
			select {
			case running <- task:
			default: // already told
			}
		}
	}
	if _, err := tasks.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
	}); err != nil {
		fmt.Println(err)
		return
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), tasks.Informer().HasSynced) {
		fmt.Println("informer did not sync")
		return
	}
	cached, _ := tasks.Lister().GPUTasks("team-a").Get("render-1")
	fmt.Printf("%s is %q\n", cached.Name, cached.Status.Phase)

	// The controller's part.
	go func() {
		task, err := clientset.GputaskV1().GPUTasks("team-a").Get(ctx, "render-1", metav1.GetOptions{})
		if err != nil {
			return
		}
		task.Status.Phase = gputaskv1.GPUTaskRunning
		task.Status.NodeName = "gpu-node-1"
		task.Status.GPUModel = "NVIDIA-A100-SXM4-80GB"
		_, _ = clientset.GputaskV1().GPUTasks("team-a").UpdateStatus(ctx, task, metav1.UpdateOptions{})
	}()

	select {
	case task := <-running:
		fmt.Printf("%s is %s on %s (%s)\n", task.Name, task.Status.Phase, task.Status.NodeName, task.Status.GPUModel)
	case <-ctx.Done():
		fmt.Println("gave up waiting:", ctx.Err())
	}
	// Output:
	// render-1 is ""
	// render-1 is Running on gpu-node-1 (NVIDIA-A100-SXM4-80GB)
}

// Server-side apply declares the fields a program owns, under its field
// manager, and creates the object if it is missing. Applying again with a
// change updates only those fields. Another manager that applies a different
// value for an owned field gets a Conflict, unless it forces and takes the
// field over, as a controller that is the field's only writer does.
func Example_serverSideApply() {
	ctx := context.Background()
	clientset := fake.NewClientset()
	tasks := clientset.GputaskV1().GPUTasks("team-a")

	task := func(image string) *applyv1.GPUTaskApplyConfiguration {
		return applyv1.GPUTask("render-1", "team-a").
			WithLabels(map[string]string{"app": "render"}).
			WithSpec(applyv1.GPUTaskSpec().
				WithGPU("NVIDIA-A100-SXM4-80GB").
				WithGPUAmount(intstr.FromInt32(1)).
				WithImage(image))
	}
	if _, err := tasks.Apply(ctx, task("registry.example/render:1.4"), metav1.ApplyOptions{FieldManager: "render-pipeline"}); err != nil {
		fmt.Println(err)
		return
	}
	got, err := tasks.Apply(ctx, task("registry.example/render:1.5"), metav1.ApplyOptions{FieldManager: "render-pipeline"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(got.Name, "runs", got.Spec.Image)
	for _, mf := range got.ManagedFields {
		fmt.Println("managed by", mf.Manager, mf.Operation)
	}

	_, err = tasks.Apply(ctx, task("registry.example/render:2.0"), metav1.ApplyOptions{FieldManager: "someone-else"})
	fmt.Println("someone else's apply conflicts:", apierrors.IsConflict(err))
	// Output:
	// render-1 runs registry.example/render:1.5
	// managed by render-pipeline Apply
	// someone else's apply conflicts: true
}

// GPUTaskSet status has several writers: the set controller counts tasks, the
// autoscaler reports the load index, each with ApplyStatus under its own field
// manager. Each apply names only its writer's fields and conditions, so no
// writer reads the status first, and none undoes another's. A monitoring
// program that adds a condition of its own follows the same pattern.
func Example_applyStatus() {
	ctx := context.Background()
	clientset := fake.NewClientset(&gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "render", Namespace: "team-a"},
	})
	sets := clientset.GputaskV1().GPUTaskSets("team-a")
	now := metav1.Now()

	counts := applyv1.GPUTaskSet("render", "team-a").WithStatus(applyv1.GPUTaskSetStatus().
		WithReplicas(3).
		WithReadyReplicas(2))
	if _, err := sets.ApplyStatus(ctx, counts, metav1.ApplyOptions{FieldManager: "gputaskset-controller", Force: true}); err != nil {
		fmt.Println(err)
		return
	}
	load := applyv1.GPUTaskSet("render", "team-a").WithStatus(applyv1.GPUTaskSetStatus().
		WithLoadIndex("0.83").
		WithDesiredReplicas(4).
		WithConditions(metav1apply.Condition().
			WithType(gputaskv1.ConditionScalingActive).
			WithStatus(metav1.ConditionTrue).
			WithReason("ValidLoadIndex").
			WithMessage("the load index was read").
			WithLastTransitionTime(now)))
	got, err := sets.ApplyStatus(ctx, load, metav1.ApplyOptions{FieldManager: "gputask-autoscaler", Force: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	st := got.Status
	fmt.Printf("replicas %d, ready %d, load %s, desired %d, %s=%s\n",
		st.Replicas, st.ReadyReplicas, st.LoadIndex, *st.DesiredReplicas,
		st.Conditions[0].Type, st.Conditions[0].Status)
	// The server orders managedFields by time, then by manager: the two
	// applies above can fall in the same second or in two.
	var managers []string
	for _, mf := range got.ManagedFields {
		managers = append(managers, mf.Manager+" "+string(mf.Operation))
	}
	slices.Sort(managers)
	fmt.Println(strings.Join(managers, "\n"))
	// Output:
	// replicas 3, ready 2, load 0.83, desired 4, ScalingActive=True
	// gputask-autoscaler Apply
	// gputaskset-controller Apply
}
