package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// What failed, said first: a failed section's error leads with the failing assertion and the
// figures it had; logs go to a file under the raw output directory, which the error names.

// goTestEntry is a `file.go:NN: message` line of go test's output (a t.Log/t.Error/t.Fatal
// call's output), indented 4 spaces per test level.
var goTestEntry = regexp.MustCompile(`^( +)[^\s:]+\.go:\d+: `)

// goBuildError is a compiler or vet message at column 0 (`./x.go:12:3: undefined: y`).
var goBuildError = regexp.MustCompile(`^\S+\.go:\d+:\d+: `)

// maxEntryLines bounds the continuation lines kept of one entry; the rest is in the log file.
const maxEntryLines = 8

// GoTestFailure returns the lines of go test's text output (not -v, not -json) that say what
// failed: every `--- FAIL` line; the failed tests' and benchmarks' messages under them (go
// test's text does not tell a t.Errorf from a t.Logf, so both are kept: the logs say what the
// test had done) with a log dump — a message whose first line is `--- <name> ---` or ends in
// "log…:" and has lines under it — reduced to that first line and its length; panics (a test
// timeout is one) with the lines up to the first blank one; build errors and the package FAIL
// lines. Entries longer than maxEntryLines are cut. Nil when nothing failed.
func GoTestFailure(out string) []string {
	lines := strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n")
	var kept []string
	inFail := false // under a --- FAIL line, until a line at column 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case strings.HasPrefix(trimmed, "--- FAIL"):
			kept = append(kept, line)
			inFail = true
		case strings.HasPrefix(trimmed, "--- PASS") || strings.HasPrefix(trimmed, "--- SKIP"):
			inFail = false
		case inFail && goTestEntry.MatchString(line):
			indent := len(line) - len(trimmed)
			var cont []string
			for i+1 < len(lines) && isContinuation(lines[i+1], indent) {
				i++
				cont = append(cont, lines[i])
			}
			kept = append(kept, entryLines(line, cont)...)
		case strings.HasPrefix(line, "panic: "):
			kept = append(kept, line)
			for n := 0; n < 6 && i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != ""; n++ {
				i++
				kept = append(kept, lines[i])
			}
			inFail = false
		case strings.HasPrefix(line, "# ") || goBuildError.MatchString(line) ||
			strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "FAIL "):
			kept = append(kept, line)
			inFail = false
		case line != "" && line[0] != ' ' && line[0] != '\t':
			inFail = false
		}
	}
	return kept
}

// goTestHeadline picks, from GoTestFailure's lines, the one most likely to say what failed: a
// panic (a test timeout is one), else a build error, else the last message before the first log
// dump (a t.Fatalf is followed by the cleanups' logs), else the last message; "" when none.
func goTestHeadline(lines []string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") {
			return l
		}
	}
	for _, l := range lines {
		if goBuildError.MatchString(l) {
			return l
		}
	}
	last := ""
	for _, l := range lines {
		if !goTestEntry.MatchString(l) {
			continue
		}
		if strings.HasSuffix(l, reducedDump) {
			if last != "" {
				break
			}
			continue
		}
		last = strings.TrimSpace(l)
	}
	return last
}

// isContinuation reports whether line continues an entry indented indent spaces: it is indented
// deeper (go test indents a message's further lines 4 more) and is not a --- line of a subtest.
func isContinuation(line string, indent int) bool {
	trimmed := strings.TrimLeft(line, " \t")
	if trimmed == "" {
		return false
	}
	return len(line)-len(strings.TrimLeft(line, " ")) > indent && !strings.HasPrefix(trimmed, "--- FAIL") &&
		!strings.HasPrefix(trimmed, "--- PASS") && !strings.HasPrefix(trimmed, "--- SKIP")
}

// entryLines keeps an entry (first line, continuation lines): a log dump as its first line and
// its length, others cut after maxEntryLines.
func entryLines(first string, cont []string) []string {
	if len(cont) > 0 && isLogDump(first) {
		return []string{fmt.Sprintf("%s [%d %s", first, len(cont), reducedDump)}
	}
	if len(cont) > maxEntryLines {
		return append(append([]string{first}, cont[:maxEntryLines]...), fmt.Sprintf("%s… %d more lines: in the log file", strings.Repeat(" ", len(first)-len(strings.TrimLeft(first, " "))+4), len(cont)-maxEntryLines))
	}
	return append([]string{first}, cont...)
}

// reducedDump ends the line GoTestFailure keeps of a log dump.
const reducedDump = "log lines: in the log file]"

// logDumpHeader matches the first line of a message that introduces a log: `--- last lines of
// kubelet.log ---`, `agent x log lines about y (last 60):`.
var logDumpHeader = regexp.MustCompile(`(?i)(^--- .* ---\s*$)|(\blogs?\b.*:\s*$)`)

func isLogDump(entry string) bool {
	msg := goTestEntry.ReplaceAllString(entry, "")
	return logDumpHeader.MatchString(msg)
}

// writeLog writes a section's log (a command's whole output) to <raw dir>/<name> and returns
// the path to name in the report (relative to the repository root when the raw dir is).
func writeLog(o *Options, name, content string) (string, error) {
	dir := o.RawDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(o.Root, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		return "", err
	}
	return filepath.Join(o.RawDir, name), nil
}

// failureText is a failed section's error text: a first line saying what failed (headline),
// then the detail lines, indented, then where the whole log is.
func failureText(headline string, detail []string, logPath string) string {
	var b strings.Builder
	b.WriteString(headline)
	for _, d := range detail {
		b.WriteString("\n")
		b.WriteString(d)
	}
	if logPath != "" {
		fmt.Fprintf(&b, "\nwhole output: %s", logPath)
	}
	return b.String()
}

// fileSafe turns s into a file name part: letters, digits, '.', '_' and '-' kept, runs of
// anything else one '-'.
func fileSafe(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		ok := r == '.' || r == '_' || r == '-' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}
