package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/runtime/chat"
)

// ChatCommand is `sinf-run chat`: an interactive conversation on the
// terminal through the model's chat template.
func ChatCommand() *cli.Command {
	return &cli.Command{
		Name:      "chat",
		Usage:     "chat with a .sinf instruct model on the terminal (its chat template; Ctrl-C stops a reply, Ctrl-D or /exit quits, /reset starts over)",
		UsageText: "sinf-run chat --model FILE.sinf [--system TEXT] [options]",
		Flags: append(ModelFlags(), []cli.Flag{
			&cli.StringFlag{Name: "system", Usage: "a system message to open the conversation with"},
			&cli.Uint64Flag{Name: "seed", Usage: "sampling seed of each reply (0, as sinf-run's)"},
		}...),
		Action: func(c *cli.Context) error {
			o, err := Open(c, 1)
			if err != nil {
				return err
			}
			defer o.L.Close()
			if o.Template == nil {
				if errors.Is(o.TemplateErr, chat.ErrNoTemplate) {
					return fmt.Errorf("%w: this model has no chat template; give one with --chat-template FILE (or use sinf-run --prompt)", o.TemplateErr)
				}
				return o.TemplateErr
			}
			cfg := o.Cfg
			cfg.MaxBodyBytes = 1 << 20
			srv, err := New(cfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, os.Interrupt)
			defer signal.Stop(sig)
			req := request{maxTokens: cfg.MaxTokens, sampling: cfg.Sampling, sparsity: cfg.Sparsity, seed: c.Uint64("seed"), seeded: true}
			return chatLoop(srv, req, c.String("system"), c.App.Reader, c.App.Writer, sig)
		},
	}
}

const chatHelp = `commands:
  /help    this list
  /reset   forget the conversation (the --system message stays)
  /exit    quit (also /quit, or Ctrl-D)
Ctrl-C stops the reply being written; a line starting with // is sent with one /.`

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatLoop runs the conversation loop: each line read from in is a user turn;
// the reply to the whole conversation (rendered through the template, as
// HF's apply_chat_template with add_generation_prompt, the turns' text
// encoded as text: Server.encodeChat) streams to out. A
// value on interrupt stops the reply being generated (the part written
// stays in the conversation) or, at the prompt, says how to quit. End of
// input, /exit or /quit ends it; /reset forgets all but the system message.
// A conversation that outgrows the context loses its oldest turns
// (fitTurns), which it says the first time.
func chatLoop(srv *Server, req request, system string, in io.Reader, out io.Writer, interrupt <-chan os.Signal) error {
	var msgs []message
	if system != "" {
		msgs = append(msgs, message{"system", system})
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(in)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	fmt.Fprintln(out, "(Ctrl-C stops a reply; Ctrl-D or /exit quits; /reset starts over; /help)")
	told := false // that turns are dropped
	for {
		fmt.Fprint(out, "> ")
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				fmt.Fprintln(out)
				return nil
			}
			line = strings.TrimRight(l, "\r\n")
		case <-interrupt:
			fmt.Fprintln(out, "\n(Ctrl-D or /exit quits)")
			continue
		}
		cmd := strings.TrimSpace(line)
		switch cmd {
		case "":
			continue
		case "/exit", "/quit":
			return nil
		case "/help", "/?":
			fmt.Fprintln(out, chatHelp)
			continue
		case "/reset":
			msgs = msgs[:0]
			if system != "" {
				msgs = append(msgs, message{"system", system})
			}
			fmt.Fprintln(out, "(conversation cleared)")
			continue
		}
		if strings.HasPrefix(cmd, "/") && !strings.HasPrefix(cmd, "//") {
			fmt.Fprintf(out, "(unknown command %s; /help lists them, and // at the start sends a line that begins with /)\n", strings.Fields(cmd)[0])
			continue
		}
		if strings.HasPrefix(strings.TrimLeft(line, " \t"), "//") {
			line = strings.Replace(line, "//", "/", 1)
		}
		msgs = append(msgs, message{"user", line})
		list := make([]json.RawMessage, len(msgs))
		for i, m := range msgs {
			list[i], _ = json.Marshal(m)
		}
		if e := srv.admit(); e != nil {
			return e
		}
		// the conversation's oldest turns go once it outgrows the context
		// (the system message stays); content is encoded as text (encodeChat)
		ids, dropped, e := srv.fitList(context.Background(), "the conversation", list, nil, req.maxTokens)
		if e != nil {
			srv.release()
			msgs = msgs[:len(msgs)-1]
			if e.Code == "context_length_exceeded" {
				fmt.Fprintf(out, "error: %s; /reset to start over\n", e.Message)
			} else {
				fmt.Fprintf(out, "error: %s\n", e.Message)
			}
			continue
		}
		if dropped > 0 {
			first := 0
			if system != "" {
				first = 1
			}
			msgs = append(msgs[:first], msgs[first+dropped:]...)
			if !told {
				fmt.Fprintf(out, "(the conversation outgrew the context of %d positions: its oldest turns are dropped from now on, the system message kept)\n", srv.Context())
				told = true
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			select {
			case <-interrupt:
				cancel()
			case <-done:
			}
		}()
		var reply strings.Builder
		_, err := srv.generate(ctx, time.Now(), ids, req, func(t string, _ []tokenLogprob) error {
			reply.WriteString(t)
			_, err := io.WriteString(out, t)
			return err
		})
		close(done)
		cancel()
		srv.release()
		switch {
		case errors.Is(err, errCancelled):
			fmt.Fprint(out, " [stopped]")
		case err != nil:
			return err
		}
		fmt.Fprintln(out)
		msgs = append(msgs, message{"assistant", reply.String()})
	}
}
