package http

import (
	"net/http"

	"github.com/lapsehq/lapse"
)

func (s *Server) listCards(w http.ResponseWriter, r *http.Request) {
	cs, err := s.engine.Cards(r.Context(), r.PathValue("order_no"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	if cs == nil {
		cs = []*lapse.Card{}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"cards": cs})
}

// useCard counts one visit of a card: 201 with the card as the visit left
// it. The optional Idempotency-Key header makes a retry count nothing and
// answer 200 with the card as the first call's visit left it, as a refund's
// retry does.
func (s *Server) useCard(w http.ResponseWriter, r *http.Request) {
	id, err := s.bareID(w, r, "a card id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	c, counted, err := s.engine.UseCard(r.Context(), id, r.Header.Get("Idempotency-Key"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	status := http.StatusOK
	if counted {
		status = http.StatusCreated
	} else {
		repeated(r)
	}
	s.writeJSON(w, r, status, c)
}
