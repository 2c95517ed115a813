// Command worker stands in for an inference server on the real node. Each
// request to /generate takes a fixed service time in one of a bounded
// number of slots, and waits for a free slot first. The worker reports its
// load as a load index on /load ({"data":{"load_balance":x}}, the requests
// it holds over its slots) and as vLLM's metrics on /metrics, and is Ready
// on /ready while it takes work.
//
// As the controller's scale-in expects of a worker, it marks its own pod
// gputask.io/busy: "true" while it holds work (cleared once it has been
// idle for --idle-after, or at once when it drains), reads
// gputask.io/draining from the pod's annotations through a downward API
// volume, and then answers 503 to new requests while it finishes the ones
// it holds. On SIGTERM it does the same, lingers while clients that have
// not yet seen the pod go still send to it, and exits 0. With --crash-after
// it only exits with an error, for the tests of a crashing container.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	annotationBusy     = "gputask.io/busy"
	annotationDraining = "gputask.io/draining"
)

func main() {
	var (
		addr        = flag.String("listen", ":8000", "address of the HTTP server")
		slots       = flag.Int("slots", 4, "requests served at once")
		serviceTime = flag.Duration("service-time", 500*time.Millisecond, "how long one request is served")
		annotations = flag.String("annotations-file", "/etc/podinfo/annotations", "the pod's annotations, from a downward API volume")
		idleAfter   = flag.Duration("idle-after", time.Second, "how long without work before busy is cleared")
		linger      = flag.Duration("linger", time.Second, "how long to answer 503 after SIGTERM once idle, before exiting")
		model       = flag.String("model", "worker", "model_name label of the metrics")
		crashAfter  = flag.Duration("crash-after", 0, "when above 0, exit with --crash-code this long after the start, as a crashing server does")
		crashCode   = flag.Int("crash-code", 3, "exit code of --crash-after")
	)
	flag.Parse()
	log.SetFlags(log.Lmicroseconds)
	if *crashAfter > 0 {
		time.Sleep(*crashAfter)
		log.Printf("crashing with exit code %d, as told", *crashCode)
		os.Exit(*crashCode)
	}

	w := &worker{slots: make(chan struct{}, *slots), nslots: *slots, serviceTime: *serviceTime, changed: make(chan struct{}, 1)}
	w.idle = sync.NewCond(&w.mu)
	marker, err := newBusyMarker(os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME"))
	if err != nil {
		log.Fatalf("busy marker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.watchDraining(ctx, *annotations)
	go w.markBusy(ctx, marker, *idleAfter)

	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": *model}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_running", Help: "Requests in a slot.", ConstLabels: labels},
			func() float64 { r, _, _ := w.counts(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting", Help: "Requests waiting for a slot.", ConstLabels: labels},
			func() float64 { _, wt, _ := w.counts(); return float64(wt) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Requests served.", ConstLabels: labels},
			func() float64 { _, _, s := w.counts(); return float64(s) }),
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/generate", w.generate)
	mux.HandleFunc("/load", w.load)
	mux.HandleFunc("/ready", w.ready)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	log.Printf("serving on %s: %d slots, %v a request", *addr, *slots, *serviceTime)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-served:
		log.Fatalf("server: %v", err)
	case <-stop:
	}
	held := w.terminate()
	log.Printf("SIGTERM: finishing %d requests", held)
	w.waitIdle()
	// Clients may still pick this pod until they see it go; they get 503
	// and try another.
	time.Sleep(*linger)
	shutdown, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	if err := srv.Shutdown(shutdown); err != nil {
		log.Fatalf("shutdown: %v", err)
	}
	_, _, success := w.counts()
	log.Printf("exiting: %d requests served", success)
}

type worker struct {
	slots       chan struct{}
	nslots      int
	serviceTime time.Duration
	// changed is signalled whenever the held count or the draining state
	// changes, for markBusy.
	changed chan struct{}

	mu                    sync.Mutex
	running, waiting      int
	success               int64
	draining, terminating bool
	idle                  *sync.Cond
}

func (w *worker) counts() (running, waiting int, success int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running, w.waiting, w.success
}

func (w *worker) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// admit takes a request unless the worker drains or stops.
func (w *worker) admit() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining || w.terminating {
		return false
	}
	w.waiting++
	w.notify()
	return true
}

func (w *worker) generate(rw http.ResponseWriter, r *http.Request) {
	if !w.admit() {
		http.Error(rw, "draining", http.StatusServiceUnavailable)
		return
	}
	// An admitted request is served whatever happens next: the client is
	// not told to go elsewhere once it was taken.
	w.slots <- struct{}{}
	w.mu.Lock()
	w.waiting--
	w.running++
	w.mu.Unlock()
	time.Sleep(w.serviceTime)
	<-w.slots
	w.mu.Lock()
	w.running--
	w.success++
	if w.running+w.waiting == 0 {
		w.idle.Broadcast()
	}
	w.mu.Unlock()
	w.notify()
	rw.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(rw, `{"pod":%q}`+"\n", os.Getenv("POD_NAME"))
}

func (w *worker) load(rw http.ResponseWriter, _ *http.Request) {
	running, waiting, _ := w.counts()
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(map[string]any{"data": map[string]float64{"load_balance": float64(running+waiting) / float64(w.nslots)}})
}

// ready is the readinessProbe: Ready until SIGTERM. A draining worker stays
// Ready, since it still serves what it holds.
func (w *worker) ready(rw http.ResponseWriter, _ *http.Request) {
	w.mu.Lock()
	terminating := w.terminating
	w.mu.Unlock()
	if terminating {
		http.Error(rw, "terminating", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(rw, "ok")
}

// terminate stops admitting requests and returns how many it holds.
func (w *worker) terminate() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.terminating = true
	return w.running + w.waiting
}

func (w *worker) waitIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.running+w.waiting > 0 {
		w.idle.Wait()
	}
}

// watchDraining polls the downward API file, which the kubelet rewrites
// when the pod's annotations change. Draining is never taken back: a task
// whose drain the controller takes back is kept, and the worker would only
// lose the requests it refused meanwhile, which clients send elsewhere.
func (w *worker) watchDraining(ctx context.Context, path string) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		draining, err := readAnnotation(path, annotationDraining)
		if err != nil {
			log.Printf("reading %s: %v", path, err)
		}
		w.mu.Lock()
		if draining == "true" && !w.draining {
			w.draining = true
			log.Printf("draining: finishing %d requests, refusing new ones", w.running+w.waiting)
			w.notify()
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readAnnotation reads one annotation from a downward API file, where each
// line is key="value" with the value quoted as Go quotes strings.
func readAnnotation(path, key string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), "=")
		if !ok || k != key {
			continue
		}
		return strconv.Unquote(v)
	}
	return "", s.Err()
}

// markBusy keeps the pod's busy annotation to the worker's state: set as
// soon as it holds work, cleared after idleAfter without any, or at once
// when it drains, so that the controller deletes its task without waiting.
func (w *worker) markBusy(ctx context.Context, m *busyMarker, idleAfter time.Duration) {
	marked := false
	var idleSince time.Time
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for {
		w.mu.Lock()
		held, draining := w.running+w.waiting, w.draining
		w.mu.Unlock()
		want := marked
		switch {
		case held > 0:
			want, idleSince = true, time.Time{}
		case draining:
			want = false
		case idleSince.IsZero():
			idleSince = time.Now()
		case time.Since(idleSince) >= idleAfter:
			want = false
		}
		if want != marked {
			if err := m.mark(ctx, want); err != nil {
				log.Printf("marking busy=%t: %v", want, err)
			} else {
				marked = want
				log.Printf("busy=%t", want)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
		case <-retry.C:
		}
	}
}

// busyMarker patches the worker's own pod, through the API server at the
// kubernetes Service's address, with the pod's ServiceAccount token.
type busyMarker struct {
	client         kubernetes.Interface
	namespace, pod string
}

func newBusyMarker(namespace, pod string) (*busyMarker, error) {
	if namespace == "" || pod == "" {
		return nil, errors.New("POD_NAMESPACE and POD_NAME must be set (downward API)")
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &busyMarker{client: client, namespace: namespace, pod: pod}, nil
}

func (m *busyMarker) mark(ctx context.Context, busy bool) error {
	value := "null"
	if busy {
		value = `"true"`
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, annotationBusy, value)
	_, err := m.client.CoreV1().Pods(m.namespace).Patch(ctx, m.pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}
