package http

import (
	"net/http"

	"github.com/lapsehq/lapse/engine"
)

// probeView is GET /v1/probe: the synthetic probe's interval ("0s": off)
// and this process's last runs, newest first.
type probeView struct {
	Interval string            `json:"interval"`
	Runs     []engine.ProbeRun `json:"runs"`
}

// getProbe shows the synthetic probe of this process. Each interval's
// probe runs in one process of those sharing the database, so another
// process may show other runs.
func (s *Server) getProbe(w http.ResponseWriter, r *http.Request) {
	v := probeView{Interval: "0s", Runs: []engine.ProbeRun{}}
	if s.probe != nil {
		v.Interval, v.Runs = s.probe.Interval().String(), s.probe.Runs()
	}
	for i := range v.Runs {
		if v.Runs[i].Steps == nil {
			v.Runs[i].Steps = []engine.ProbeStep{}
		}
	}
	s.writeJSON(w, r, http.StatusOK, v)
}
