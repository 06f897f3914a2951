package http

import (
	_ "embed"
	"net/http"
)

// openapiJSON is the OpenAPI 3.1 document of this API, served at
// /openapi.json. It is written by hand, for people first; a test checks that
// it lists exactly the routes the server registers, and the fields of the
// types it shows.
//
//go:embed openapi.json
var openapiJSON []byte

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openapiJSON)
}
