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

// Classes of transport failure. Like every error of this package, their
// messages are fixed text: nothing the server sent (a body, a header, a
// certificate's names, the bytes of a malformed answer) ever reaches a
// status, an event or a metric, where the set's author could read it.
var (
	ErrConnectionRefused = errors.New("connection refused")
	ErrConnectionReset   = errors.New("connection closed by the server")
	ErrUnreachable       = errors.New("host unreachable")
	ErrDNS               = errors.New("DNS lookup failed")
	ErrTLS               = errors.New("TLS handshake failed")
	ErrRedirect          = errors.New("redirect refused")
	ErrTransport         = errors.New("connection failed")
)

// plainHTTPToTLS is how net/http reports an HTTP answer to a TLS
// handshake; it hides the tls.RecordHeaderError behind a plain error.
const plainHTTPToTLS = "server gave HTTP response to HTTPS client"

// classifiedError carries a fixed message and its class, and keeps the
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
// to its class. The detail added to the class is always text of our own.
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

// Class names the kind of a failed read in one CamelCase word, for the
// "class" label of the load-index error metric: a small, fixed set of
// values, never text from the answer.
func Class(err error) string {
	for _, c := range []struct {
		err   error
		class string
	}{
		{ErrSecretNotAllowed, "SecretNotAllowed"},
		{ErrDestinationRefused, "DestinationRefused"},
		{ErrTimeout, "Timeout"},
		{ErrStatus, "HTTPStatus"},
		{ErrTLS, "TLS"},
		{ErrConnectionRefused, "ConnectionRefused"},
		{ErrConnectionReset, "ConnectionReset"},
		{ErrUnreachable, "Unreachable"},
		{ErrDNS, "DNS"},
		{ErrRedirect, "RedirectRefused"},
		{ErrTransport, "ConnectionFailed"},
		{ErrBodyTooLarge, "BodyTooLarge"},
		{ErrBadJSON, "InvalidJSON"},
		{ErrMissingField, "FieldNotFound"},
		{ErrNotNumber, "NotANumber"},
		{ErrNaN, "InvalidValue"},
		{ErrInf, "InvalidValue"},
		{ErrNegative, "InvalidValue"},
		{ErrQuery, "QueryFailed"},
	} {
		if errors.Is(err, c.err) {
			return c.class
		}
	}
	return "Other"
}
