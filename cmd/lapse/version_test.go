package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestVersionText(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/lapsehq/lapse", Version: "v1.4.2"},
		Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "-trimpath", Value: "true"},
			{Key: "vcs.time", Value: "2026-11-29T09:00:00Z"}, {Key: "vcs.revision", Value: "0123456789abcdef"}}}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	want := "lapse     v1.4.2\n" +
		"module    github.com/lapsehq/lapse\n" +
		"revision  0123456789abcdef\n" +
		"time      2026-11-29T09:00:00Z\n" +
		"modified  true\n" +
		"go        go1.99.1 " + platform + "\n"
	if got := versionText(bi); got != want {
		t.Errorf("versionText:\n%s\nwant\n%s", got, want)
	}
	// Without build information (a binary built without modules).
	want = "lapse   unknown\nmodule  github.com/lapsehq/lapse\ngo      " + runtime.Version() + " " + platform + "\n"
	if got := versionText(nil); got != want {
		t.Errorf("versionText(nil):\n%s\nwant\n%s", got, want)
	}
}
