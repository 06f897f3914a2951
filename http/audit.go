package http

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/lapsehq/lapse"
)

// auditJSON is one row of the audit log as the API shows it. A row not
// sealed yet has no seq and no hash.
type auditJSON struct {
	ID           int64     `json:"id"`
	Seq          int64     `json:"seq,omitempty"`
	At           time.Time `json:"at"`
	ActorKind    string    `json:"actor_kind"`
	ActorID      string    `json:"actor_id"`
	Actor        string    `json:"actor"`
	Role         string    `json:"role,omitempty"`
	Action       string    `json:"action"`
	Target       string    `json:"target,omitempty"`
	Params       rawJSON   `json:"params,omitempty"`
	Result       string    `json:"result"`
	Reason       string    `json:"reason,omitempty"`
	SecondFactor string    `json:"second_factor,omitempty"`
	Approver     string    `json:"approver,omitempty"`
	ApprovalID   int64     `json:"approval_id,omitempty"`
	Batch        int64     `json:"batch,omitempty"`
	ClientAddr   string    `json:"client_addr,omitempty"`
	Hash         string    `json:"hash,omitempty"`
}

// rawJSON shows params that are JSON as JSON, and anything else as a string.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	if json.Valid(r) {
		return r, nil
	}
	return json.Marshal(string(r))
}

func auditOut(e *lapse.AuditEntry) auditJSON {
	return auditJSON{ID: e.ID, Seq: e.Seq, At: e.At, ActorKind: e.ActorKind, ActorID: e.ActorID, Actor: e.ActorName, Role: e.Role,
		Action: e.Action, Target: e.Target, Params: lapse.AuditMaskParams(e.Action, e.Params), Result: e.Result, Reason: e.Reason, SecondFactor: e.SecondFactor,
		Approver: e.Approver, ApprovalID: e.ApprovalID, Batch: e.Batch, ClientAddr: e.ClientAddr, Hash: hex.EncodeToString(e.Hash)}
}

// listAudit pages the audit log by row id, newest first unless order=asc,
// with next_cursor for the next page; rows not sealed yet are in it too.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	as, err := s.accessStore()
	if err != nil {
		s.error(w, r, err)
		return
	}
	q, err := listQuery(r.URL.RawQuery, "actor", "action", "target", "order", "cursor", "batch", "limit")
	if err != nil {
		s.error(w, r, err)
		return
	}
	p := &lapse.AuditListParams{Descending: true, Limit: 100, ActorName: q.Get("actor"), Action: q.Get("action"), Target: q.Get("target")}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		p.Descending = false
	default:
		s.error(w, r, lapse.FieldError("order", "must be asc or desc"))
		return
	}
	for name, dst := range map[string]*int64{"cursor": &p.Cursor, "batch": &p.Batch} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				s.error(w, r, lapse.FieldError(name, "must be a non-negative integer"))
				return
			}
			*dst = n
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			s.error(w, r, lapse.FieldError("limit", "must be between 1 and 1000"))
			return
		}
		p.Limit = n
	}
	rows, err := as.AuditList(r.Context(), p)
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := make([]auditJSON, 0, len(rows))
	for _, e := range rows {
		out = append(out, auditOut(e))
	}
	body := map[string]any{"entries": out}
	if len(rows) == p.Limit {
		body["next_cursor"] = rows[len(rows)-1].ID
	}
	s.writeJSON(w, r, http.StatusOK, body)
}

// verifyAudit walks the whole chain, as lapse audit verify does, checks
// the row of ?checkpoint=ROW:HASH when one is given, and counts the rows
// not sealed yet (it does not seal them: the server's sealer does).
func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request) {
	q, err := listQuery(r.URL.RawQuery, "checkpoint")
	if err != nil {
		s.error(w, r, err)
		return
	}
	var cp *lapse.AuditCheckpoint
	if v := q.Get("checkpoint"); v != "" {
		c, err := lapse.ParseAuditCheckpoint(v)
		if err != nil {
			s.error(w, r, err)
			return
		}
		cp = &c
	}
	as, err := s.accessStore()
	if err != nil {
		s.error(w, r, err)
		return
	}
	c, err := lapse.AuditVerify(r.Context(), as, 1000)
	if err == nil && cp != nil {
		err = lapse.AuditCheckpointHolds(r.Context(), as, c, *cp)
	}
	var brk *lapse.AuditBreak
	body := map[string]any{"ok": err == nil, "rows": c.Rows}
	switch {
	case errors.As(err, &brk):
		body["broken_at"], body["reason"] = brk.Seq, brk.Reason
	case err != nil:
		s.error(w, r, err)
		return
	default:
		body["unsealed"] = c.Unsealed
		if c.Unsealed > 0 {
			body["oldest_unsealed_at"] = c.OldestUnsealed
		}
		if c.Rows > 0 {
			body["checkpoint"] = c.Checkpoint().String()
		}
	}
	s.writeJSON(w, r, http.StatusOK, body)
}

// accessStore is the store's audit log, batches and the rest.
func (s *Server) accessStore() (lapse.AccessStore, error) {
	if s.accessDB == nil {
		return nil, lapse.Errorf(lapse.EINTERNAL, "http: the server has no access store")
	}
	return s.accessDB, nil
}
