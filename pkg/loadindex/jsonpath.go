package loadindex

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// valueLocation is read with gjson, as KEDA's metrics-api scaler reads its
// own valueLocation, so that a path written for one works in the other:
//
//   - "data.load_balance" selects a key of an object, level by level;
//   - "items.0.v" selects index 0 of an array;
//   - "data.gpu\.util" selects the key "gpu.util": a backslash escapes a dot
//     (and the other special characters *, ?, #, |, @);
//   - "items.#" is an array's length, and "items.#(name==\"a\").v" selects
//     the first element whose name is "a".
//
// The plain dot paths written before gjson read the same as they always did.

// checkPath catches the typos that gjson would quietly read as "no value",
// so that they fail when the set is configured rather than at every read.
func checkPath(path string) error {
	if path == "" {
		return errors.New("must not be empty")
	}
	if strings.HasPrefix(path, ".") || (strings.HasSuffix(path, ".") && !strings.HasSuffix(path, `\.`)) {
		return fmt.Errorf("%q starts or ends with a dot", path)
	}
	if strings.Contains(strings.ReplaceAll(path, `\.`, ""), "..") {
		return fmt.Errorf("%q has an empty segment", path)
	}
	return nil
}

// ExtractValue finds the number at path in the JSON document doc. The value
// may be a JSON number or a string holding a number, since many backends
// quote their figures. It must be finite and not negative.
//
// Errors say what went wrong and where, never what the document holds: the
// document comes from a server that the set's author may not be entitled to
// read (see DestinationPolicy).
func ExtractValue(doc []byte, path string) (float64, error) {
	if err := checkPath(path); err != nil {
		return 0, fmt.Errorf("value location: %w", err)
	}
	if !gjson.ValidBytes(doc) {
		return 0, ErrBadJSON
	}
	res := gjson.GetBytes(doc, path)
	if !res.Exists() {
		return 0, fmt.Errorf("%w: %q", ErrMissingField, path)
	}
	v, err := toNumber(res)
	if err != nil {
		return 0, fmt.Errorf("at %q: %w", path, err)
	}
	v, err = checkValue(v)
	if err != nil {
		return 0, fmt.Errorf("at %q: %w", path, err)
	}
	return v, nil
}

func toNumber(res gjson.Result) (float64, error) {
	var text string
	switch res.Type {
	case gjson.Number:
		// Raw keeps every digit; res.Num went through gjson's own parsing.
		text = res.Raw
	case gjson.String:
		text = strings.TrimSpace(res.Str)
	default:
		return 0, fmt.Errorf("%w: got %s", ErrNotNumber, kindOf(res))
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		var numErr *strconv.NumError
		// Out of range parses to ±Inf, which checkValue reports as such.
		if errors.As(err, &numErr) && errors.Is(numErr.Err, strconv.ErrRange) {
			return v, nil
		}
		return 0, fmt.Errorf("%w: got a non-numeric string", ErrNotNumber)
	}
	return v, nil
}

func kindOf(res gjson.Result) string {
	switch {
	case res.Type == gjson.Null:
		return "null"
	case res.Type == gjson.True, res.Type == gjson.False:
		return "a boolean"
	case res.IsObject():
		return "an object"
	case res.IsArray():
		return "an array"
	default:
		return res.Type.String()
	}
}
