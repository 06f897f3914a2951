package porttest

import "net/http/httptest"

// StockServer is a StockService running on a local httptest.Server.
type StockServer struct {
	*StockService
	// URL is the base URL of the service: a Port's Config.URL.
	URL    string
	server *httptest.Server
}

// NewStockServer starts a StockService with opts on a local server. The
// caller closes it, usually with t.Cleanup(srv.Close).
func NewStockServer(opts Options) *StockServer {
	svc := NewStockService(opts)
	srv := httptest.NewServer(svc)
	return &StockServer{StockService: svc, URL: srv.URL, server: srv}
}

// Close releases the requests the service holds, then shuts the server
// down.
func (s *StockServer) Close() {
	s.StockService.Close()
	s.server.Close()
}
