package app

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	OutputTable = ""
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// printStructured writes v as JSON or YAML; false when format is a table format.
func printStructured(w io.Writer, format string, v any) (bool, error) {
	var b []byte
	var err error
	switch format {
	case OutputJSON:
		b, err = json.MarshalIndent(v, "", "  ")
		b = append(b, '\n')
	case OutputYAML:
		b, err = yaml.Marshal(v)
	default:
		return false, nil
	}
	if err == nil {
		_, err = w.Write(b)
	}
	return true, err
}

func age(now time.Time, t *time.Time) string {
	if t == nil || t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(*t))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// printer writes a report line by line and keeps the first write error, so a report is written
// with plain calls and its error returned once, at the end.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) println(a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintln(p.w, a...)
	}
}

// table writes rows through a tabwriter (aligned columns) and flushes it.
func (p *printer) table(rows func(t *printer)) {
	if p.err != nil {
		return
	}
	tw := tabwriter.NewWriter(p.w, 0, 8, 2, ' ', 0)
	t := &printer{w: tw}
	rows(t)
	if p.err = t.err; p.err == nil {
		p.err = tw.Flush()
	}
}

// PrintStatus writes the status report in format.
func PrintStatus(w io.Writer, format string, now time.Time, r *StatusReport) error {
	if done, err := printStructured(w, format, r); done {
		return err
	}
	wide := format == OutputWide
	p := &printer{w: w}
	p.table(func(t *printer) {
		if wide {
			t.println("NODE\tKIND\tPV\tPOD\tPATH\tDEVICE\tSINCE\tCOUNT\tMESSAGE")
		} else {
			t.println("NODE\tKIND\tPV\tPOD\tPATH\tSINCE")
		}
		for _, n := range r.Nodes {
			if len(n.Items) == 0 {
				if wide {
					t.printf("%s\tok\t\t\t\t\t\t\t\n", n.Name)
				} else {
					t.printf("%s\tok\t\t\t\t\n", n.Name)
				}
				continue
			}
			for _, it := range n.Items {
				if wide {
					t.printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.Name, it.Kind, orNone(it.PV), orNone(it.Pod), orNone(it.Path),
						orNone(it.Device), age(now, it.Since), it.Count, it.Message)
				} else {
					t.printf("%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, it.Kind, orNone(it.PV), orNone(it.Pod), orNone(it.Path), age(now, it.Since))
				}
			}
		}
	})
	p.println()
	if len(r.Unprotected) == 0 {
		p.println("Unprotected pods: none (every pod with local block or S3 volumes in opted-in namespaces was mutated)")
	} else {
		p.printf("Unprotected pods (%d): admitted without the webhook; recreate them\n", len(r.Unprotected))
		p.table(func(t *printer) {
			t.println("NAMESPACE\tNAME\tNODE\tPHASE\tVOLUMES\tAGE")
			for _, u := range r.Unprotected {
				t.printf("%s\t%s\t%s\t%s\t%s\t%s\n", u.Namespace, u.Name, orNone(u.Node), u.Phase, strings.Join(u.Volumes, ","), age(now, &u.Created))
			}
		})
	}
	for _, n := range r.Notes {
		p.printf("Note: %s\n", n)
	}
	return p.err
}

// PrintExplanation writes the explanation in format.
func PrintExplanation(w io.Writer, format string, now time.Time, e *Explanation) error {
	if done, err := printStructured(w, format, e); done {
		return err
	}
	p := &printer{w: w}
	p.printf("Pod:     %s/%s\nNode:    %s\n", e.Namespace, e.Name, orNone(e.Node))
	switch {
	case e.Webhook != nil:
		st := e.Webhook
		p.println("Webhook: mutated (annotation pvrescue.io/status)")
		for _, g := range st.Guards {
			p.printf("  guard %s: %s (fake-device policy %s)\n", g.Container, strings.Join(g.Devices, " "), orNone(st.FakeDevicePolicy))
		}
		if st.Install != "" {
			p.printf("  install:  helper copied into the pod by %s\n", st.Install)
		}
		for _, c := range st.Containers {
			kind := "container"
			if c.Init {
				kind = "init container"
			}
			p.printf("  %s %s: %s\n", kind, c.Name, orNone(strings.Join(c.Injected, ", ")))
		}
		for _, s := range st.Skipped {
			switch {
			case s.Volume != "":
				p.printf("  skipped volume %s: %s\n", s.Volume, s.Reason)
			default:
				p.printf("  skipped %s in %s: %s\n", s.What, s.Container, s.Reason)
			}
		}
	case e.Mutated:
		p.printf("Webhook: mutated, but %s\n", e.Reason)
	default:
		p.printf("Webhook: not mutated: %s\n", e.Reason)
	}
	p.println("\nVolumes:")
	if len(e.Volumes) == 0 {
		p.println("  none that pvrescue acts on")
	} else {
		p.table(func(t *printer) {
			t.println("  VOLUME\tKIND\tCLAIM\tPV\tFAKE DEVICE\tSOURCE")
			for _, v := range e.Volumes {
				t.printf("  %s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Kind, orNone(v.Claim), orNone(v.PV), orNone(v.FakeDevice), orNone(v.Source))
			}
		})
	}
	p.println("\nEvents:")
	if len(e.Events) == 0 {
		p.println("  none")
		return p.err
	}
	p.table(func(t *printer) {
		t.println("  LAST SEEN\tOBJECT\tTYPE\tREASON\tMESSAGE")
		for _, ev := range e.Events {
			t.printf("  %s\t%s\t%s\t%s\t%s\n", age(now, &ev.Time), ev.Object, ev.Type, ev.Reason, ev.Message)
		}
	})
	return p.err
}
