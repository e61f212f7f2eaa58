package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/format"
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
		UsageText: "sinf chat-template --model DIR|FILE.sinf --messages FILE.json [--add-generation-prompt=false] [--var NAME=JSON]...\n" +
			"sinf chat-template --chat-template FILE.jinja [--model DIR|FILE.sinf] --messages FILE.json ...\n\n" +
			"DIR needs only tokenizer_config.json; FILE.json holds an array of {\"role\", \"content\"} objects; the prompt is printed exactly, with no newline added",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "a folder holding tokenizer_config.json, or a .sinf file (with --chat-template: where its bos_token and eos_token come from)"},
			&cli.StringFlag{Name: "chat-template", Usage: "a Jinja template file to render instead of the model's, as sinf-run serve and chat --chat-template use it"},
			&cli.StringFlag{Name: "messages", Required: true, Usage: "a JSON file: an array of message objects (role, content, tool_calls, ...)"},
			&cli.BoolFlag{Name: "add-generation-prompt", Value: true, Usage: "end with the assistant's header (add_generation_prompt)"},
			&cli.GenericFlag{Name: "var", Value: &varsFlag{}, Usage: "an extra template variable as NAME=JSON (tools, enable_thinking, ...); repeatable"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("unexpected arguments %q", c.Args().Slice())
			}
			tmpl, err := loadTemplate(c.String("model"), c.String("chat-template"))
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

// loadTemplate returns the model's template, or with file the template in
// it, given the model's special tokens when a model is named.
func loadTemplate(model, file string) (*chat.Template, error) {
	if file == "" {
		if model == "" {
			return nil, errors.New("give --model (its chat template) or --chat-template FILE")
		}
		return chat.Load(model)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--chat-template: %w", err)
	}
	special := map[string]string{}
	if model != "" {
		name, cfg, err := tokenizerConfig(model)
		if err != nil {
			return nil, err
		}
		if special, err = chat.SpecialTokens(name, cfg); err != nil {
			return nil, err
		}
	}
	return chat.New(file, string(src), special)
}

// tokenizerConfig reads a model's tokenizer_config.json: the file in a
// folder, or a .sinf file's metadata field (none: empty).
func tokenizerConfig(model string) (string, []byte, error) {
	fi, err := os.Stat(model)
	if err != nil {
		return "", nil, err
	}
	if fi.IsDir() {
		p := filepath.Join(model, "tokenizer_config.json")
		b, err := os.ReadFile(p)
		return p, b, err
	}
	f, err := format.Open(model)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	return model + ": metadata field tokenizer_config", f.Metadata().TokenizerConfig, nil
}
