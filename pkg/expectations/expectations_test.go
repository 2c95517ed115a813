package expectations

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestExpectations(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := New(clk, time.Minute)

	if !e.Satisfied("ns/a") {
		t.Fatal("a key with no expectation must be satisfied")
	}
	e.ExpectCreations("ns/a", 1)
	if e.Satisfied("ns/a") {
		t.Fatal("a pending creation must block")
	}
	if !e.Satisfied("ns/b") {
		t.Fatal("expectations of one key must not block another")
	}
	e.CreationObserved("ns/a")
	if !e.Satisfied("ns/a") {
		t.Fatal("an observed creation must unblock")
	}
	e.CreationObserved("ns/a") // a late or duplicate observation is harmless
	if !e.Satisfied("ns/a") {
		t.Fatal("a duplicate observation must not block")
	}

	e.ExpectCreations("ns/a", 2)
	e.CreationObserved("ns/a")
	if e.Satisfied("ns/a") {
		t.Fatal("one of two creations observed must still block")
	}
	clk.Step(time.Minute + time.Second)
	if !e.Satisfied("ns/a") {
		t.Fatal("an expired expectation must unblock")
	}

	e.ExpectCreations("ns/c", 1)
	e.Delete("ns/c")
	if !e.Satisfied("ns/c") {
		t.Fatal("a deleted key must be satisfied")
	}
}

func TestDeletionsAndAnnotations(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := New(clk, time.Minute)
	const key = "default/set"

	if !e.Satisfied(key) {
		t.Fatal("a set with no record must be satisfied")
	}

	e.ExpectCreations(key, 2)
	e.ExpectDeletions(key, "a", "b")
	e.ExpectAnnotation(key, "c", "a", "T1")
	if e.Satisfied(key) {
		t.Fatal("pending writes must not be satisfied")
	}

	e.CreationObserved(key)
	e.CreationObserved(key)
	e.CreationObserved(key) // a stray extra observation must not go below zero
	e.DeletionObserved(key, "a")
	e.DeletionObserved(key, "a") // seen twice: deletion timestamp, then delete
	e.AnnotationObserved(key, "c", map[string]string{"a": "T0"})
	if e.Satisfied(key) {
		t.Fatal("deletion of b and annotation T1 on c are still pending")
	}
	e.DeletionObserved(key, "b")
	e.AnnotationObserved(key, "c", map[string]string{"a": "T1"})
	if !e.Satisfied(key) {
		t.Fatal("every write was observed; want satisfied")
	}

	// Two annotations of one object are expected apart.
	e.ExpectAnnotation(key, "c", "a", "T4")
	e.ExpectAnnotation(key, "c", "b", "")
	e.AnnotationObserved(key, "c", map[string]string{"a": "T4", "b": "x"})
	if e.Satisfied(key) {
		t.Fatal("annotation b of c, removed, still shows; want pending")
	}
	e.AnnotationObserved(key, "c", map[string]string{"a": "T4"})
	if !e.Satisfied(key) {
		t.Fatal("both annotations of c were observed; want satisfied")
	}

	// A deleted task settles its annotation expectation too.
	e.ExpectAnnotation(key, "d", "a", "T2")
	e.DeletionObserved(key, "d")
	if !e.Satisfied(key) {
		t.Fatal("deleting an annotated task must settle its expectation")
	}

	// A failed patch is forgotten.
	e.ExpectAnnotation(key, "e", "a", "T3")
	e.ForgetAnnotation(key, "e", "a")
	if !e.Satisfied(key) {
		t.Fatal("a forgotten annotation must not block")
	}

	// Expiry: a lost event blocks the set only for the timeout.
	e.ExpectCreations(key, 1)
	clk.Step(time.Minute)
	if e.Satisfied(key) {
		t.Fatal("not expired yet at exactly the timeout")
	}
	clk.Step(time.Second)
	if !e.Satisfied(key) {
		t.Fatal("expired expectations must be satisfied")
	}
	// The expired record was dropped, so new writes count from zero.
	e.ExpectCreations(key, 1)
	e.CreationObserved(key)
	if !e.Satisfied(key) {
		t.Fatal("the expired creation must not linger in the new record")
	}

	e.ExpectCreations(key, 3)
	e.Delete(key)
	if !e.Satisfied(key) {
		t.Fatal("Delete must drop the record")
	}
}

// TestObservedRecordsDropped proves an owner whose writes are all seen
// keeps no record, whichever observation came last.
func TestObservedRecordsDropped(t *testing.T) {
	e := New(nil, time.Minute)
	e.ExpectCreations("ns/a", 2)
	e.ExpectDeletions("ns/b", "pod-1")
	e.ExpectAnnotation("ns/c", "task-1", "a", "v1")
	e.ExpectAnnotation("ns/d", "task-2", "a", "v1")
	if len(e.byKey) != 4 {
		t.Fatalf("%d records, want 4", len(e.byKey))
	}
	e.CreationObserved("ns/a")
	if _, ok := e.byKey["ns/a"]; !ok || e.Satisfied("ns/a") {
		t.Error("ns/a dropped with a creation still pending")
	}
	e.CreationObserved("ns/a")
	e.DeletionObserved("ns/b", "pod-1")
	e.AnnotationObserved("ns/c", "task-1", map[string]string{"a": "v0"})
	if _, ok := e.byKey["ns/c"]; !ok {
		t.Error("ns/c dropped on another value")
	}
	e.AnnotationObserved("ns/c", "task-1", map[string]string{"a": "v1"})
	e.ForgetAnnotation("ns/d", "task-2", "a")
	if len(e.byKey) != 0 {
		t.Errorf("records left after every write was seen: %v", e.byKey)
	}
}
