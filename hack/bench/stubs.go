package main

import "context"

func runLostMount(ctx context.Context, o *Options) Section {
	return Section{Title: "Agent, lost mount"}
}
func runScale(ctx context.Context, o *Options) Section { return Section{Title: "Agent at scale"} }
