package expectations

import (
	"testing"
	"time"
)

func TestExpectations(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := NewWithClock(time.Minute, func() time.Time { return now })

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
	now = now.Add(time.Minute)
	if !e.Satisfied("ns/a") {
		t.Fatal("an expired expectation must unblock")
	}

	e.ExpectCreations("ns/c", 1)
	e.Delete("ns/c")
	if !e.Satisfied("ns/c") {
		t.Fatal("a deleted key must be satisfied")
	}
}
