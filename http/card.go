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

func (s *Server) useCard(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "a card id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.decodeOptional(w, r, &struct{}{}); err != nil {
		s.error(w, r, err)
		return
	}
	c, err := s.engine.UseCard(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, c)
}
