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
	switch format {
	case OutputJSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return true, err
	case OutputYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = w.Write(b)
		return true, err
	}
	return false, nil
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

// PrintStatus writes the status report in format.
func PrintStatus(w io.Writer, format string, now time.Time, r *StatusReport) error {
	if done, err := printStructured(w, format, r); done {
		return err
	}
	wide := format == OutputWide
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "NODE\tKIND\tPV\tPOD\tPATH\tDEVICE\tSINCE\tCOUNT\tMESSAGE")
	} else {
		fmt.Fprintln(tw, "NODE\tKIND\tPV\tPOD\tPATH\tSINCE")
	}
	for _, n := range r.Nodes {
		if len(n.Items) == 0 {
			if wide {
				fmt.Fprintf(tw, "%s\tok\t\t\t\t\t\t\t\n", n.Name)
			} else {
				fmt.Fprintf(tw, "%s\tok\t\t\t\t\n", n.Name)
			}
			continue
		}
		for _, it := range n.Items {
			if wide {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.Name, it.Kind, orNone(it.PV), orNone(it.Pod), orNone(it.Path),
					orNone(it.Device), age(now, it.Since), it.Count, it.Message)
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, it.Kind, orNone(it.PV), orNone(it.Pod), orNone(it.Path), age(now, it.Since))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(r.Unprotected) == 0 {
		fmt.Fprintln(w, "Unprotected pods: none (every pod with local block or S3 volumes in opted-in namespaces was mutated)")
	} else {
		fmt.Fprintf(w, "Unprotected pods (%d): admitted without the webhook; recreate them\n", len(r.Unprotected))
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMESPACE\tNAME\tNODE\tPHASE\tVOLUMES\tAGE")
		for _, p := range r.Unprotected {
			t := p.Created
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, orNone(p.Node), p.Phase, strings.Join(p.Volumes, ","), age(now, &t))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	return nil
}

// PrintExplanation writes the explanation in format.
func PrintExplanation(w io.Writer, format string, now time.Time, e *Explanation) error {
	if done, err := printStructured(w, format, e); done {
		return err
	}
	fmt.Fprintf(w, "Pod:     %s/%s\nNode:    %s\n", e.Namespace, e.Name, orNone(e.Node))
	switch {
	case e.Webhook != nil:
		st := e.Webhook
		fmt.Fprintln(w, "Webhook: mutated (annotation pvrescue.io/status)")
		for _, g := range st.Guards {
			fmt.Fprintf(w, "  guard %s: %s (fake-device policy %s)\n", g.Container, strings.Join(g.Devices, " "), orNone(st.FakeDevicePolicy))
		}
		if st.Install != "" {
			fmt.Fprintf(w, "  install:  helper copied into the pod by %s\n", st.Install)
		}
		for _, c := range st.Containers {
			kind := "container"
			if c.Init {
				kind = "init container"
			}
			fmt.Fprintf(w, "  %s %s: %s\n", kind, c.Name, orNone(strings.Join(c.Injected, ", ")))
		}
		for _, s := range st.Skipped {
			switch {
			case s.Volume != "":
				fmt.Fprintf(w, "  skipped volume %s: %s\n", s.Volume, s.Reason)
			default:
				fmt.Fprintf(w, "  skipped %s in %s: %s\n", s.What, s.Container, s.Reason)
			}
		}
	case e.Mutated:
		fmt.Fprintf(w, "Webhook: mutated, but %s\n", e.Reason)
	default:
		fmt.Fprintf(w, "Webhook: not mutated: %s\n", e.Reason)
	}
	fmt.Fprintln(w, "\nVolumes:")
	if len(e.Volumes) == 0 {
		fmt.Fprintln(w, "  none that pvrescue acts on")
	} else {
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  VOLUME\tKIND\tCLAIM\tPV\tFAKE DEVICE\tSOURCE")
		for _, v := range e.Volumes {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Kind, orNone(v.Claim), orNone(v.PV), orNone(v.FakeDevice), orNone(v.Source))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nEvents:")
	if len(e.Events) == 0 {
		fmt.Fprintln(w, "  none")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  LAST SEEN\tOBJECT\tTYPE\tREASON\tMESSAGE")
	for _, ev := range e.Events {
		t := ev.Time
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", age(now, &t), ev.Object, ev.Type, ev.Reason, ev.Message)
	}
	return tw.Flush()
}
