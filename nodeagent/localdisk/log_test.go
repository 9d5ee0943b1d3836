package localdisk

import (
	"context"

	"github.com/go-logr/logr"
)

func logrIntoContext(ctx context.Context, l logr.Logger) context.Context {
	return logr.NewContext(ctx, l)
}
