package loadindex

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// Kinds of transport failure, for errors.Is and the controller's log. None
// of them reaches a tenant as such: a read error shows its ReadClass only.
var (
	ErrConnectionRefused = errors.New("connection refused")
	ErrConnectionReset   = errors.New("connection closed by the server")
	ErrUnreachable       = errors.New("host unreachable")
	ErrDNS               = errors.New("DNS lookup failed")
	ErrTLS               = errors.New("TLS handshake failed")
	ErrRedirect          = errors.New("redirect refused")
	ErrTransport         = errors.New("connection failed")
)

// ReadClass is the coarse kind of a failed read: all that a set's status,
// its events and the error metric ever say about it. A finer detail (which
// status code, at which byte the JSON broke, how many series a query gave,
// a refused connection rather than a timeout) would let the set's author
// probe a server or a network they may not reach themselves, so it goes to
// the controller's log only (see Detail).
type ReadClass string

// The classes of a failed read.
const (
	ClassUnreachable     ReadClass = "Unreachable"
	ClassTLS             ReadClass = "TLS"
	ClassHTTP4xx         ReadClass = "HTTP4xx"
	ClassHTTP5xx         ReadClass = "HTTP5xx"
	ClassInvalidAnswer   ReadClass = "InvalidAnswer"
	ClassNotANumber      ReadClass = "NotANumber"
	ClassRefusedByPolicy ReadClass = "RefusedByPolicy"
)

// ClassInvalidMetricSpec is the metric label of a source that could not be
// built from its spec; its message is about the spec, which the set's
// author wrote.
const ClassInvalidMetricSpec = "InvalidMetricSpec"

var classMessages = map[ReadClass]string{
	ClassUnreachable:     "load index unreachable",
	ClassTLS:             "TLS failure",
	ClassHTTP4xx:         "the server answered HTTP 4xx",
	ClassHTTP5xx:         "the server answered HTTP 5xx",
	ClassInvalidAnswer:   "invalid answer",
	ClassNotANumber:      "value is not a number",
	ClassRefusedByPolicy: "destination refused by the controller's policy",
}

// ReadError is a failed read. Its message is its class's fixed text; the
// precise cause stays inside, for errors.Is and errors.As and for Detail.
type ReadError struct {
	Class ReadClass
	cause error
}

func (e *ReadError) Error() string { return classMessages[e.Class] }

// Unwrap gives the precise cause.
func (e *ReadError) Unwrap() error { return e.cause }

// Detail returns the precise cause of a failed read, for the controller's
// log (at -v=2) and never for a status, an event or a metric: it may name a
// status code, an address or the place where an answer broke. Any other
// error is returned as its own text.
func Detail(err error) string {
	var readErr *ReadError
	if errors.As(err, &readErr) && readErr.cause != nil {
		return readErr.cause.Error()
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// asReadError gives err its class; an error that already has one keeps it.
func asReadError(err error) error {
	if err == nil {
		return nil
	}
	var readErr *ReadError
	if errors.As(err, &readErr) {
		return err
	}
	return &ReadError{Class: classOf(err), cause: err}
}

// classOf maps the precise errors of a read to their coarse class.
func classOf(err error) ReadClass {
	var statusErr *StatusError
	switch {
	case errors.Is(err, ErrDestinationRefused), errors.Is(err, ErrRedirect):
		return ClassRefusedByPolicy
	case errors.Is(err, ErrTLS):
		return ClassTLS
	case errors.As(err, &statusErr):
		return statusClass(statusErr.Code)
	case errors.Is(err, ErrNotNumber), errors.Is(err, ErrNaN), errors.Is(err, ErrInf):
		return ClassNotANumber
	case errors.Is(err, ErrBadJSON), errors.Is(err, ErrMissingField), errors.Is(err, ErrNegative),
		errors.Is(err, ErrBodyTooLarge), errors.Is(err, ErrQuery):
		return ClassInvalidAnswer
	default:
		// Timeouts, refused and reset connections, DNS and routing
		// failures look the same from outside: the source was not reached.
		return ClassUnreachable
	}
}

func statusClass(code int) ReadClass {
	switch {
	case code >= 400 && code < 500:
		return ClassHTTP4xx
	case code >= 500 && code < 600:
		return ClassHTTP5xx
	default:
		// 1xx and 3xx answers that were not followed carry no load index.
		return ClassInvalidAnswer
	}
}

// plainHTTPToTLS is how net/http reports an HTTP answer to a TLS
// handshake; it hides the tls.RecordHeaderError behind a plain error.
const plainHTTPToTLS = "server gave HTTP response to HTTPS client"

// classifiedError carries a fixed message and its kind, and keeps the
// underlying cause for errors.Is and errors.As without printing it.
type classifiedError struct {
	msg   string
	class error
	cause error
}

func (e *classifiedError) Error() string   { return e.msg }
func (e *classifiedError) Unwrap() []error { return []error{e.class, e.cause} }

func classified(class error, detail string, cause error) error {
	msg := class.Error()
	if detail != "" {
		msg += ": " + detail
	}
	return &classifiedError{msg: msg, class: class, cause: cause}
}

// classifyTransport maps an error of http.Client.Do, or of reading the body,
// to its kind. The detail added to the kind is always text of our own, so
// that even the controller's log never repeats what a server sent.
func classifyTransport(err error) error {
	var (
		refused    = &destinationError{}
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
		verifyErr  *tls.CertificateVerificationError
		recordErr  tls.RecordHeaderError
		alertErr   tls.AlertError
		dnsErr     *net.DNSError
		redirErr   *redirectError
	)
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		return err
	case errors.As(err, &refused):
		return classified(ErrDestinationRefused, refused.rule, err)
	case errors.As(err, &redirErr):
		return classified(ErrRedirect, redirErr.reason, err)
	case errors.As(err, &unknownCA):
		return classified(ErrTLS, "certificate signed by an unknown authority", err)
	case errors.As(err, &hostErr):
		return classified(ErrTLS, "certificate not valid for the host", err)
	case errors.As(err, &invalidErr):
		return classified(ErrTLS, "certificate invalid or expired", err)
	case errors.As(err, &verifyErr):
		return classified(ErrTLS, "certificate not verified", err)
	case errors.As(err, &recordErr), strings.Contains(err.Error(), plainHTTPToTLS):
		return classified(ErrTLS, "the server does not speak TLS", err)
	case errors.As(err, &alertErr):
		return classified(ErrTLS, "the server sent a TLS alert", err)
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return classified(ErrDNS, "host not found", err)
		}
		return classified(ErrDNS, "", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return classified(ErrConnectionRefused, "", err)
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return classified(ErrConnectionReset, "", err)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return classified(ErrUnreachable, "", err)
	case errors.Is(err, context.Canceled):
		return classified(context.Canceled, "", err)
	default:
		// net/http's own messages may quote the server's bytes ("malformed
		// HTTP response ..."), so the text of an unknown error is never used.
		return classified(ErrTransport, "", err)
	}
}

// Class names the kind of a failure in one CamelCase word, for the "class"
// label of the load-index error metric: a ReadClass for a failed read,
// InvalidMetricSpec for a source that could not be built.
func Class(err error) string {
	var readErr *ReadError
	if errors.As(err, &readErr) {
		return string(readErr.Class)
	}
	return ClassInvalidMetricSpec
}
