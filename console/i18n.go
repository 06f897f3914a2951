package console

import (
	"fmt"
	"net/http"
	"strings"
)

// Languages of the console.
const (
	langEN = "en"
	langZH = "zh"
)

// msg is one message in both languages. Every message has both: a test
// checks that no text is empty, and that every key a template uses is here.
type msg struct{ en, zh string }

// messages are every text of the console, by key. A page's messages live
// beside its handler, in a table of its own, added here by init, so that
// pages do not share one file; keys are prefixed with the page's name.
var messages = map[string]msg{}

// addMessages adds a page's messages; a key defined twice is a bug.
func addMessages(m map[string]msg) {
	for k, v := range m {
		if _, dup := messages[k]; dup {
			panic("console: message " + k + " defined twice")
		}
		messages[k] = v
	}
}

func init() {
	addMessages(map[string]msg{
		"app.name":          {"Lapse console", "Lapse 控制台"},
		"nav.queue":         {"Review queue", "复核队列"},
		"nav.approvals":     {"Approvals", "审批"},
		"nav.close":         {"Manual close", "手动关单"},
		"nav.dashboard":     {"Dashboard", "看板"},
		"nav.audit":         {"Audit log", "审计日志"},
		"nav.logout":        {"Sign out", "退出"},
		"nav.logout_all":    {"Sign out everywhere", "在所有设备上退出"},
		"nav.language":      {"Language", "语言"},
		"nav.timezone":      {"Time zone", "时区"},
		"nav.save":          {"Save", "保存"},
		"role.viewer":       {"viewer", "只读"},
		"role.operator":     {"operator", "操作员"},
		"role.admin":        {"admin", "管理员"},
		"login.title":       {"Sign in", "登录"},
		"login.name":        {"Name", "用户名"},
		"login.password":    {"Password", "密码"},
		"login.code":        {"Authenticator code", "动态验证码"},
		"login.submit":      {"Sign in", "登录"},
		"login.failed":      {"Name, password or code is wrong.", "用户名、密码或验证码错误。"},
		"login.unavailable": {"Signing in is not possible now: the server could not check it. Try again later.", "现在无法登录：服务器无法完成验证，请稍后再试。"},
		"login.too_many":    {"Too many sign-in attempts from your address. Try again in %s seconds.", "来自你的地址的登录尝试过多，请 %s 秒后再试。"},
		"logout.failed":     {"Signing out failed, and you are still signed in: try again.", "退出失败，你仍处于登录状态，请重试。"},
		"logout.all_failed": {"Signing out everywhere failed, and your sessions are still in force: try again.", "在所有设备上退出失败，你的会话仍然有效，请重试。"},
		"common.none":       {"Nothing here.", "暂无内容。"},
		"common.code":       {"Authenticator code", "动态验证码"},
		"common.code_help":  {"Risky actions need a code from your authenticator. A code is good once; one you gave in the last few minutes still counts, so leave the field empty then.", "高风险操作需要动态验证码。每个验证码只能使用一次；几分钟内已输入过验证码时仍然有效，此时可留空。"},
		"common.submit":     {"Submit", "提交"},
		"common.cancel":     {"Cancel", "取消"},
		"common.done":       {"Done.", "已完成。"},
		"common.pending":    {"Waiting for a second operator's approval (request %v).", "已提交，等待另一位操作员审批（申请 %v）。"},
		"common.error":      {"Refused: %v", "被拒绝：%v"},
		"common.forbidden":  {"Your role does not allow this.", "你的角色无权执行此操作。"},
		"common.not_found":  {"Not found.", "未找到。"},
		"common.prev":       {"Newer", "较新"},
		"common.next":       {"Older", "较旧"},
		"lang.en":           {"English", "English"},
		"lang.zh":           {"简体中文", "简体中文"},
	})
}

// t returns the message key in lang, formatted with args when it has verbs.
// An unknown key shows as itself, in brackets, so that a missing message is
// seen in a page and caught by the tests.
func t(lang, key string, args ...any) string {
	m, ok := messages[key]
	if !ok {
		return "[" + key + "]"
	}
	s := m.en
	if lang == langZH {
		s = m.zh
	}
	if len(args) > 0 {
		return fmt.Sprintf(s, args...)
	}
	return s
}

// langOf is the language of a page for r: the operator's, else the
// browser's first choice between the two.
func langOf(r *http.Request, operatorLang string) string {
	switch operatorLang {
	case langEN, langZH:
		return operatorLang
	}
	for _, part := range strings.Split(r.Header.Get("Accept-Language"), ",") {
		tag := strings.ToLower(strings.TrimSpace(strings.SplitN(part, ";", 2)[0]))
		switch {
		case strings.HasPrefix(tag, "zh"):
			return langZH
		case strings.HasPrefix(tag, "en"):
			return langEN
		}
	}
	return langEN
}
