package mountreplace

import (
	"sync"

	"github.com/pvrescue/pvrescue/internal/ossthread"
)

var nodeSupport = sync.OnceValue(func() Support { return Probe("", ossthread.Run) })

// NodeSupport is Probe's answer for this process, probed once on first use, so the agent's
// start-up log line, containermount and s3mount all act on the same answer.
func NodeSupport() Support { return nodeSupport() }
