package v1

import (
	"encoding/json"
	"time"
)

// Duration is a length of time written as a Go duration string, such as
// "30s", "1m30s" or "2h".
//
// It reads like metav1.Duration, with one difference: a string that does not
// parse is kept in Unparsed instead of failing the decode. The CRD refuses
// such strings, but an object stored before its schema did so, or written
// while the schema was relaxed, would otherwise fail to decode, and with it
// the informer's whole list: one bad object would stop every GPUTaskSet in
// the cluster. The controllers report Unparsed as InvalidSpec on that object
// alone (see ValidateTaskSetSpec).
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
// +kubebuilder:validation:MaxLength=32
type Duration struct {
	// Duration is the parsed length; zero when Unparsed is set.
	Duration time.Duration `json:"-"`
	// Unparsed holds the JSON as written when it is not a valid duration
	// string, such as "abc", "" or 30.
	Unparsed string `json:"-"`
}

// UnmarshalJSON implements json.Unmarshaler. It never fails: JSON that is not
// a duration string is recorded in Unparsed.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if parsed, err := time.ParseDuration(s); err == nil {
			*d = Duration{Duration: parsed}
			return nil
		}
	}
	*d = Duration{Unparsed: string(b)}
	return nil
}

// MarshalJSON implements json.Marshaler. An unparsed value is written back
// as it was read, so an update never rewrites what the user wrote.
func (d Duration) MarshalJSON() ([]byte, error) {
	if d.Unparsed != "" {
		if json.Valid([]byte(d.Unparsed)) {
			return []byte(d.Unparsed), nil
		}
		return json.Marshal(d.Unparsed)
	}
	return json.Marshal(d.Duration.String())
}

// Valid reports whether the value parsed as a duration. A nil Duration is valid.
func (d *Duration) Valid() bool { return d == nil || d.Unparsed == "" }

// String returns the duration as Go writes it, or the unparsed JSON.
func (d Duration) String() string {
	if d.Unparsed != "" {
		return d.Unparsed
	}
	return d.Duration.String()
}

// ToUnstructured implements value.UnstructuredConverter, so that converting
// to unstructured (as server-side apply and the fake clients do) gives what
// MarshalJSON writes.
func (d Duration) ToUnstructured() any {
	if d.Unparsed != "" {
		var v any
		if err := json.Unmarshal([]byte(d.Unparsed), &v); err == nil {
			return v
		}
		return d.Unparsed
	}
	return d.Duration.String()
}
