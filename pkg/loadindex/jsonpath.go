package loadindex

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// parsePath splits a dot path such as "data.items.0.v" into its segments.
// Every segment must be non-empty, so typos like "data..v" fail at config time.
func parsePath(path string) ([]string, error) {
	if path == "" {
		return nil, errors.New("must not be empty")
	}
	segments := strings.Split(path, ".")
	for i, s := range segments {
		if s == "" {
			return nil, fmt.Errorf("segment %d of %q is empty", i+1, path)
		}
	}
	return segments, nil
}

// ExtractValue finds the number at path in the JSON document doc. A segment
// selects an object's key, or, on an array, a zero-based index. The value may
// be a JSON number or a string holding a number, since many backends quote
// their figures. It must be finite and not negative.
func ExtractValue(doc []byte, path string) (float64, error) {
	segments, err := parsePath(path)
	if err != nil {
		return 0, fmt.Errorf("value location: %w", err)
	}
	root, err := decodeJSON(doc)
	if err != nil {
		return 0, err
	}
	node, err := walk(root, segments)
	if err != nil {
		return 0, err
	}
	v, err := toNumber(node)
	if err != nil {
		return 0, fmt.Errorf("at %q: %w", path, err)
	}
	v, err = checkValue(v)
	if err != nil {
		return 0, fmt.Errorf("at %q: %w", path, err)
	}
	return v, nil
}

// decodeJSON decodes one JSON value, keeping numbers as json.Number so no
// precision is lost before the value is chosen, and rejecting trailing data.
func decodeJSON(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadJSON, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data after the JSON value", ErrBadJSON)
	}
	return root, nil
}

func walk(node any, segments []string) (any, error) {
	for i, seg := range segments {
		at := strings.Join(segments[:i+1], ".")
		switch n := node.(type) {
		case map[string]any:
			child, ok := n[seg]
			if !ok {
				return nil, fmt.Errorf("%w: %q", ErrMissingField, at)
			}
			node = child
		case []any:
			idx, err := strconv.Atoi(seg)
			if err != nil || idx < 0 {
				return nil, fmt.Errorf("%w: %q: %q is not an index into an array", ErrMissingField, at, seg)
			}
			if idx >= len(n) {
				return nil, fmt.Errorf("%w: %q: index %d out of range (length %d)", ErrMissingField, at, idx, len(n))
			}
			node = n[idx]
		default:
			return nil, fmt.Errorf("%w: %q: parent is %s, not an object or array", ErrMissingField, at, kindOf(n))
		}
	}
	return node, nil
}

func toNumber(node any) (float64, error) {
	var text string
	switch n := node.(type) {
	case json.Number:
		text = n.String()
	case string:
		text = strings.TrimSpace(n)
	default:
		return 0, fmt.Errorf("%w: got %s", ErrNotNumber, kindOf(node))
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		var numErr *strconv.NumError
		// Out of range parses to ±Inf, which checkValue reports as such.
		if errors.As(err, &numErr) && errors.Is(numErr.Err, strconv.ErrRange) {
			return v, nil
		}
		return 0, fmt.Errorf("%w: %q", ErrNotNumber, truncate(text, 40))
	}
	return v, nil
}

func kindOf(node any) string {
	switch node.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	default:
		return fmt.Sprintf("%T", node)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
