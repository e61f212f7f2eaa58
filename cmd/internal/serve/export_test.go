package serve

import (
	"io"
	"os"
)

// ChatLoop runs the chat loop with the server's default request settings
// and the given seed.
func ChatLoop(srv *Server, seed uint64, system string, in io.Reader, out io.Writer, interrupt <-chan os.Signal) error {
	req := request{maxTokens: srv.cfg.MaxTokens, sampling: srv.cfg.Sampling, sparsity: srv.cfg.Sparsity, seed: seed, seeded: true}
	return chatLoop(srv, req, system, in, out, interrupt)
}

// ChatHelp is the chat loop's /help text.
const ChatHelp = chatHelp

// CheckSlotMemory is checkSlotMemory; MaxParallel maxParallel.
var CheckSlotMemory = checkSlotMemory

const MaxParallel = maxParallel
