package format

import (
	"os"
	"sync"
)

// temps records the temporary files made by CreateTemp.
var temps struct {
	sync.Mutex
	names []string
}

// CreateTemp is os.CreateTemp(dir, pattern) that also records the file, so
// that RemoveTemps can delete it if the process is interrupted before the
// file is renamed into place (spec/sinf.md: no partial output).
func CreateTemp(dir, pattern string) (*os.File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err == nil {
		temps.Lock()
		temps.names = append(temps.names, f.Name())
		temps.Unlock()
	}
	return f, err
}

// RemoveTemps deletes every file made by CreateTemp that still exists under
// its temporary name. Commands call it on SIGINT and SIGTERM.
func RemoveTemps() {
	temps.Lock()
	defer temps.Unlock()
	for _, n := range temps.names {
		os.Remove(n)
	}
	temps.names = nil
}
