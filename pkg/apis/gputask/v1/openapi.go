package v1

// OpenAPISchemaType tells openapi-gen that a Duration is written as a string,
// as the CRD's schema says: its fields are not serialized, MarshalJSON is.
// The apply configurations' schema, and with it server-side apply in the fake
// clientset, reads the type from here.
func (Duration) OpenAPISchemaType() []string { return []string{"string"} }

// OpenAPISchemaFormat is empty: a Go duration string has no OpenAPI format.
func (Duration) OpenAPISchemaFormat() string { return "" }
