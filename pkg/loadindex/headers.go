package loadindex

import (
	"fmt"
	"strings"
)

// Header names a source may not set, in lower case. Identity headers would
// let a set's author speak to a server as someone else: a proxy or an
// aggregated API server in front of the endpoint trusts X-Remote-User,
// Impersonate-User or X-Forwarded-For from the controller's network
// position. Hop-by-hop headers and Host would change how the request
// travels rather than what it asks. The CRD refuses the same names (the
// rule on http.headers[].name); this is the check for objects stored
// before that rule.
var (
	refusedHeaders = map[string]bool{
		"forwarded": true, "x-real-ip": true, "host": true,
		"connection": true, "te": true, "trailer": true, "transfer-encoding": true,
		"upgrade": true, "keep-alive": true,
	}
	refusedHeaderPrefixes = []string{"x-forwarded-", "x-remote-", "impersonate-", "proxy-"}
)

// checkHeaderName refuses an identity or hop-by-hop header. Authorization
// is allowed from a Secret only: inline, anyone who may read the set would
// read the credential, and the Secret admission policy and opt-in guard
// would not apply to it.
func checkHeaderName(name string, fromSecret bool) error {
	lower := strings.ToLower(name)
	if refusedHeaders[lower] {
		return fmt.Errorf("header %q may not be set: it is an identity or hop-by-hop header", name)
	}
	for _, prefix := range refusedHeaderPrefixes {
		if strings.HasPrefix(lower, prefix) {
			return fmt.Errorf("header %q may not be set: no %s* header is", name, prefix)
		}
	}
	if lower == "authorization" && !fromSecret {
		return fmt.Errorf("header %q may only come from a Secret (valueFrom)", name)
	}
	return nil
}
