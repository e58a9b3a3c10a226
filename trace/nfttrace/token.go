package nfttrace

import (
	"fmt"
	"strconv"
	"strings"
)

// token is one word of nft syntax: a name, a number, an address, a quoted
// string (quoted true, Text unquoted) or one of the punctuation marks
// "{", "}", ",", ";", or a line break ("\n").
type token struct {
	text   string
	quoted bool
	line   int
}

func (t token) is(s string) bool { return !t.quoted && t.text == s }

// tokenize splits nft text into tokens. Words are separated by white space;
// braces, commas and semicolons are tokens of their own wherever they are,
// except inside quoted strings. A "#" starts a comment up to the end of the
// line.
func tokenize(text string) ([]token, error) {
	var toks []token
	line := 1
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '\n':
			toks = append(toks, token{text: "\n", line: line})
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '#':
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '"':
			s, n, err := quoted(text[i:])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			toks = append(toks, token{text: s, quoted: true, line: line})
			i += n
		case strings.IndexByte("{},;", c) >= 0:
			toks = append(toks, token{text: string(c), line: line})
			i++
		default:
			j := i
			for j < len(text) && strings.IndexByte(" \t\r\n{},;\"", text[j]) < 0 {
				j++
			}
			toks = append(toks, token{text: text[i:j], line: line})
			i = j
		}
	}
	return toks, nil
}

// quoted reads the quoted string at the start of s (Go's %q form, which
// also reads nft's plain quotes) and returns it unquoted with the length it
// took.
func quoted(s string) (string, int, error) {
	for j := 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '\n':
			return "", 0, fmt.Errorf("unterminated string %s", s[:j])
		case '"':
			u, err := strconv.Unquote(s[:j+1])
			if err != nil {
				return s[1:j], j + 1, nil
			}
			return u, j + 1, nil
		}
	}
	return "", 0, fmt.Errorf("unterminated string %s", s)
}

// statements splits tokens into statements: runs of tokens ended by a line
// break or a semicolon outside braces. Empty statements are left out.
func statements(toks []token) [][]token {
	var out [][]token
	depth, start := 0, 0
	flush := func(end int) {
		if end > start {
			out = append(out, toks[start:end])
		}
		start = end + 1
	}
	for i, t := range toks {
		switch {
		case t.is("{"):
			depth++
		case t.is("}"):
			depth--
		case depth <= 0 && (t.is("\n") || t.is(";")):
			flush(i)
		}
	}
	flush(len(toks))
	return out
}

// words is the text of toks, separated by spaces, for messages and paths.
func words(toks []token) string {
	var b strings.Builder
	for i, t := range toks {
		if t.is("\n") {
			continue
		}
		if i > 0 && !t.is(",") {
			b.WriteByte(' ')
		}
		if t.quoted {
			b.WriteString(strconv.Quote(t.text))
		} else {
			b.WriteString(t.text)
		}
	}
	return strings.TrimSpace(b.String())
}

// stripNewlines drops the line breaks of toks (inside braces, where they
// only separate elements).
func stripNewlines(toks []token) []token {
	out := make([]token, 0, len(toks))
	for _, t := range toks {
		if !t.is("\n") {
			out = append(out, t)
		}
	}
	return out
}
