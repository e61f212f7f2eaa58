package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/runtime/chat"
)

// varsFlag collects repeated --var NAME=JSON values (not a StringSlice,
// which would split JSON at its commas).
type varsFlag struct{ list []string }

func (v *varsFlag) Set(s string) error { v.list = append(v.list, s); return nil }
func (v *varsFlag) String() string     { return "" }

func chatTemplateCommand() *cli.Command {
	return &cli.Command{
		Name:  "chat-template",
		Usage: "print the prompt a model's chat template renders for a conversation (for debugging a template)",
		UsageText: "sinf chat-template --model DIR|FILE.sinf --messages FILE.json [--add-generation-prompt=false] [--var NAME=JSON]...\n\n" +
			"DIR needs only tokenizer_config.json; FILE.json holds an array of {\"role\", \"content\"} objects; the prompt is printed exactly, with no newline added",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "a folder holding tokenizer_config.json, or a .sinf file"},
			&cli.StringFlag{Name: "messages", Required: true, Usage: "a JSON file: an array of message objects (role, content, tool_calls, ...)"},
			&cli.BoolFlag{Name: "add-generation-prompt", Value: true, Usage: "end with the assistant's header (add_generation_prompt)"},
			&cli.GenericFlag{Name: "var", Value: &varsFlag{}, Usage: "an extra template variable as NAME=JSON (tools, enable_thinking, ...); repeatable"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("unexpected arguments %q", c.Args().Slice())
			}
			tmpl, err := chat.Load(c.String("model"))
			if errors.Is(err, chat.ErrNoTemplate) {
				return fmt.Errorf("%w: the model has no chat template (it is not an instruct model, or its tokenizer_config.json lacks chat_template)", err)
			}
			if err != nil {
				return err
			}
			path := c.String("messages")
			msgs, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !json.Valid(msgs) {
				return fmt.Errorf("--messages %s: not valid JSON", path)
			}
			vars := map[string]json.RawMessage{}
			for _, s := range c.Generic("var").(*varsFlag).list {
				name, val, err := chat.ParseVar(s)
				if err != nil {
					return err
				}
				vars[name] = val
			}
			out, err := tmpl.Render(msgs, c.Bool("add-generation-prompt"), vars, chat.Options{})
			if err != nil {
				return fmt.Errorf("--messages %s: %w", path, err)
			}
			_, err = fmt.Fprint(c.App.Writer, out)
			return err
		},
	}
}
