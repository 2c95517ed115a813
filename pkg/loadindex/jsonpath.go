package loadindex

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// valueLocation is a plain path, nothing more:
//
//   - "data.load_balance" selects a key of an object, level by level;
//   - "items.0.v" selects index 0 of an array;
//   - "data.gpu\.util" selects the key "gpu.util" (a backslash escapes a dot).
//
// A query language (gjson's or JSONPath's filters, modifiers, pipes,
// multipaths and wildcards) is refused, in the CRD and here again. With a
// filter such as #(key>="kZ9") an author could make the value read depend
// on a string of the answer, and so learn a string the server holds one
// comparison at a time through the figures the autoscaler reports.

// ValueLocationPattern is the grammar of a valueLocation: segments of
// letters, digits, '_', '-' and ':', or escaped dots, joined by dots. The
// CRD's pattern on http.valueLocation is the same expression.
const ValueLocationPattern = `^([A-Za-z0-9_:-]|\\\.)+(\.([A-Za-z0-9_:-]|\\\.)+)*$`

var valueLocationRE = regexp.MustCompile(ValueLocationPattern)

// ErrInvalidLocation is a valueLocation outside the plain-path grammar.
var ErrInvalidLocation = errors.New("must be a plain path: keys of letters, digits, '_', '-' or ':' and integer indexes joined by dots, a dot in a key escaped as \\.")

// checkPath refuses anything but a plain path.
func checkPath(path string) error {
	if path == "" {
		return errors.New("must not be empty")
	}
	if !valueLocationRE.MatchString(path) {
		return fmt.Errorf("%q %w", path, ErrInvalidLocation)
	}
	return nil
}

// splitPath cuts a checked path into its segments, unescaping dots.
func splitPath(path string) []string {
	var segments []string
	var cur strings.Builder
	for i := 0; i < len(path); i++ {
		switch {
		case path[i] == '\\' && i+1 < len(path) && path[i+1] == '.':
			cur.WriteByte('.')
			i++
		case path[i] == '.':
			segments = append(segments, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(path[i])
		}
	}
	return append(segments, cur.String())
}

// lookup walks doc one segment at a time: a key of an object, or an index
// of an array. It never hands a path to gjson, whose path syntax is a query
// language, and uses it only to iterate over a valid document.
func lookup(doc gjson.Result, segments []string) (gjson.Result, bool) {
	cur := doc
	for _, seg := range segments {
		next, ok := child(cur, seg)
		if !ok {
			return gjson.Result{}, false
		}
		cur = next
	}
	return cur, true
}

func child(parent gjson.Result, seg string) (gjson.Result, bool) {
	var found gjson.Result
	ok := false
	switch {
	case parent.IsObject():
		parent.ForEach(func(key, value gjson.Result) bool {
			if key.Str == seg {
				found, ok = value, true
			}
			return !ok
		})
	case parent.IsArray():
		index, err := strconv.Atoi(seg)
		if err != nil || index < 0 || strconv.Itoa(index) != seg {
			return gjson.Result{}, false
		}
		i := 0
		parent.ForEach(func(_, value gjson.Result) bool {
			if i == index {
				found, ok = value, true
			}
			i++
			return !ok
		})
	}
	return found, ok
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
	res, ok := lookup(gjson.ParseBytes(doc), splitPath(path))
	if !ok {
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
