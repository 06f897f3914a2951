package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

func init() {
	addMessages(map[string]msg{
		"audit.title":         {"Audit log", "审计日志"},
		"audit.filter":        {"Filter", "筛选"},
		"audit.clear":         {"Clear", "清除"},
		"audit.seq":           {"No.", "序号"},
		"audit.at":            {"Time", "时间"},
		"audit.actor":         {"Actor", "操作者"},
		"audit.action":        {"Action", "操作"},
		"audit.target":        {"Target", "对象"},
		"audit.batch":         {"Batch", "批次"},
		"audit.result":        {"Result", "结果"},
		"audit.reason":        {"Reason", "原因"},
		"audit.second_factor": {"Second factor", "二次验证"},
		"audit.approver":      {"Approver", "审批人"},
		"audit.client":        {"Client address", "客户端地址"},
		"audit.params":        {"Parameters", "参数"},
		"audit.verified":      {"The chain is intact: %d rows verified.", "哈希链完整：已校验 %d 行。"},
		"audit.unsealed":      {"%d newer rows are not sealed yet, the oldest from %s; the chain covers them once the sealer has run.", "另有 %d 行尚未封存，最早的一行写于 %s；封存后即纳入哈希链。"},
		"audit.not_sealed":    {"not sealed yet", "尚未封存"},
		"audit.checkpoint":    {"Checkpoint, to keep outside the database (lapse audit verify --checkpoint checks it later):", "检查点，请保存在数据库之外（之后可用 lapse audit verify --checkpoint 校验）："},
		"audit.broken":        {"The chain is broken at row %d: %s", "哈希链在第 %d 行断裂：%s"},
		"audit.verify_failed": {"The chain could not be verified: %v", "无法校验哈希链：%v"},
		"audit.unchecked":     {"The hash chain is verified when you ask, since that reads every sealed row of the log.", "哈希链在您要求时校验，因为校验会读取日志中所有已封存的行。"},
		"audit.verify":        {"Verify the chain", "校验哈希链"},
		"audit.bad_number":    {"%s must be a whole number.", "%s 必须是整数。"},
		"audit.no_store":      {"This store keeps no audit log.", "当前存储不支持审计日志。"},
	})
}

// auditPageSize is how many rows a page of the log shows.
const auditPageSize = 50

// auditData is the audit page's data.
type auditData struct {
	Actor, Action, Target, Batch string // the filters as given
	Rows                         []*lapse.AuditEntry
	Newer, Older                 string // links to the next pages; "" when there is none
	First                        bool   // the newest page: no cursor
	Checked                      bool   // the chain was verified (asked for with ?verify=1)
	Verify                       string // the link that verifies the chain
	Verified                     int64  // rows verified intact, when Checked and Broken and VerifyError are not set
	Unsealed                     int64  // rows not sealed yet, which the verification does not cover
	OldestUnsealed               time.Time
	Checkpoint                   string // ROW:HASH of the newest row verified, "" when none
	Broken                       *lapse.AuditBreak
	VerifyError                  string
	Error                        string
	Forbidden                    bool
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	op := operatorOf(r)
	lang := langOf(r, op.Lang)
	if !op.Can(access.ScopeAuditRead) {
		c.renderStatus(w, r, http.StatusForbidden, "audit", auditData{Forbidden: true})
		return
	}
	as, ok := c.cfg.Store.(lapse.AccessStore)
	if !ok {
		c.renderStatus(w, r, http.StatusServiceUnavailable, "audit", auditData{Error: t(lang, "audit.no_store")})
		return
	}
	q := r.URL.Query()
	d := auditData{Actor: strings.TrimSpace(q.Get("actor")), Action: strings.TrimSpace(q.Get("action")),
		Target: strings.TrimSpace(q.Get("target")), Batch: strings.TrimSpace(q.Get("batch"))}
	p := &lapse.AuditListParams{Descending: true, Limit: auditPageSize, ActorName: d.Actor, Action: d.Action, Target: d.Target}
	for _, f := range []struct {
		value, label string
		dst          *int64
	}{{q.Get("cursor"), "cursor", &p.Cursor}, {d.Batch, t(lang, "audit.batch"), &p.Batch}} {
		if f.value == "" {
			continue
		}
		n, err := strconv.ParseInt(f.value, 10, 64)
		if err != nil || n < 0 {
			d.Error = t(lang, "audit.bad_number", f.label)
			c.renderStatus(w, r, http.StatusBadRequest, "audit", d)
			return
		}
		*f.dst = n
	}
	d.First = p.Cursor == 0

	// The chain is walked only when asked (?verify=1): the walk reads and
	// hashes every sealed row, and every audited request adds one, so on
	// each view of each page it would cost the database more as the log
	// grows. A view counts the rows not sealed yet, which is cheap.
	ctx := r.Context()
	d.Checked = q.Has("verify")
	if d.Checked {
		chk, err := lapse.AuditVerify(ctx, as, 1000)
		switch {
		case errors.As(err, &d.Broken):
		case err != nil:
			d.VerifyError = t(lang, "audit.verify_failed", err)
		default:
			d.Verified, d.Unsealed, d.OldestUnsealed = chk.Rows, chk.Unsealed, chk.OldestUnsealed
			if chk.Rows > 0 {
				d.Checkpoint = chk.Checkpoint().String()
			}
		}
	} else {
		var err error
		if d.Unsealed, d.OldestUnsealed, err = as.AuditUnsealedCount(ctx); err != nil {
			c.failPage(w, r, err)
			return
		}
	}

	var err error

	if d.Rows, err = as.AuditList(ctx, p); err != nil {
		c.failPage(w, r, err)
		return
	}
	for _, e := range d.Rows {
		e.Params = lapse.AuditMaskParams(e.Action, e.Params) // rows written before they were masked
	}
	// link is this page's view at cursor (0: the newest page), verifying
	// the chain when verify is set.
	link := func(cursor int64, verify bool) string {
		v := url.Values{}
		for k, s := range map[string]string{"actor": d.Actor, "action": d.Action, "target": d.Target, "batch": d.Batch} {
			if s != "" {
				v.Set(k, s)
			}
		}
		if cursor > 0 {
			v.Set("cursor", strconv.FormatInt(cursor, 10))
		}
		if verify {
			v.Set("verify", "1")
		}
		if len(v) == 0 {
			return Prefix + "audit"
		}
		return Prefix + "audit?" + v.Encode()
	}
	d.Verify = link(p.Cursor, true)
	if len(d.Rows) == p.Limit {
		d.Older = link(d.Rows[len(d.Rows)-1].ID, false)
	}
	if !d.First && len(d.Rows) > 0 {
		// The newer page is the rows just after this page's first, read
		// upwards: its cursor is one past the last of them, or none when
		// they are the newest.
		up := *p
		up.Descending, up.Cursor, up.Limit = false, d.Rows[0].ID, p.Limit+1
		newer, err := as.AuditList(ctx, &up)
		if err != nil {
			c.failPage(w, r, err)
			return
		}
		switch {
		case len(newer) == 0:
		case len(newer) <= p.Limit:
			d.Newer = link(0, false)
		default:
			d.Newer = link(newer[p.Limit-1].ID+1, false)
		}
	} else if !d.First {
		d.Newer = link(0, false)
	}
	c.render(w, r, "audit", d)
}

// failPage logs an error the operator cannot act on and answers 500.
func (c *Console) failPage(w http.ResponseWriter, r *http.Request, err error) {
	c.log.Error("console: a page failed", "path", r.URL.Path, "err", err)
	http.Error(w, "internal error", http.StatusInternalServerError)
}
