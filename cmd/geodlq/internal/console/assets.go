package console

import (
	"embed"
	"net/http"
)

// distFS holds the built page (make ui): index.html and assets/, the
// offline basemap among them, so the console needs no network.
//
//go:embed ui/dist
var distFS embed.FS

//go:embed openapi.json
var openapiDoc []byte

// openapi serves the API's OpenAPI 3.1 document.
func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openapiDoc)
}
