package serve

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// guard wraps the routes in the Host and Origin rules:
//
//   - Without an API key, the Host header must name a loopback address
//     (localhost, 127.0.0.0/8, ::1) or Config.Host: a page whose own name
//     resolves to 127.0.0.1 (DNS rebinding) is refused, 403.
//   - A request with an Origin header (a browser's cross-origin request)
//     is refused, 403, unless the origin is the request's own
//     (scheme://Host) or Config.CORSOrigin. The allowed CORS origin gets
//     Access-Control-Allow-Origin on its answers and its preflight
//     (OPTIONS with Access-Control-Request-Method) answered, 204.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.WriteTimeout > 0 {
			// A keep-alive connection's previous answer left its write
			// deadline (net/http resets it only with its own WriteTimeout).
			_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		}
		if s.cfg.APIKey == "" && !s.hostAllowed(r.Host) {
			writeError(w, &apiError{Status: http.StatusForbidden, Message: fmt.Sprintf("Host %q is not a name of this server: without --api-key only loopback names (localhost, 127.0.0.1, [::1]) and --host are served", r.Host),
				Type: "invalid_request_error", Code: "host_not_allowed"})
			return
		}
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		cors := s.cfg.CORSOrigin != "" && origin == s.cfg.CORSOrigin
		if !cors && !sameOrigin(origin, r.Host) {
			writeError(w, &apiError{Status: http.StatusForbidden, Message: fmt.Sprintf("cross-origin request from %q refused: start the server with --cors-origin %s to allow it", origin, origin),
				Type: "invalid_request_error", Code: "origin_not_allowed"})
			return
		}
		if cors {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a Host header (name or address, with or
// without a port) is loopback or the listening host.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true // RFC 6761: always loopback
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return s.cfg.Host != "" && strings.EqualFold(host, s.cfg.Host)
}

// sameOrigin reports whether origin is http://host (the server serves plain
// HTTP, so that is its own origin).
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Scheme == "http" && strings.EqualFold(u.Host, host) && u.Path == ""
}

// CheckOrigin checks a --cors-origin value: scheme://host[:port], nothing
// more.
func CheckOrigin(origin string) error {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("--cors-origin %q: want one origin, scheme://host[:port] (e.g. http://localhost:3000)", origin)
	}
	return nil
}

// limitListener accepts at most n connections open at once; Accept waits
// for one to close (the others wait in the kernel's backlog).
type limitListener struct {
	net.Listener
	sem       chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), closed: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitConn gives its place back on the first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
