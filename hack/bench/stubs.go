package main

import "context"

func runGoBench(ctx context.Context, o *Options) Section  { return Section{Title: "Go benchmarks"} }
func runLostDisk(ctx context.Context, o *Options) Section { return Section{Title: "Agent, lost disk"} }
func runLostMount(ctx context.Context, o *Options) Section {
	return Section{Title: "Agent, lost mount"}
}
func runScale(ctx context.Context, o *Options) Section { return Section{Title: "Agent at scale"} }
