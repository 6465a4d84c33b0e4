package billing_test

import (
	"os"
	"testing"

	"github.com/portico-gw/portico/testing/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m)) }
