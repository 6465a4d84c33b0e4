package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDevCountsUsage runs `portico dev` with short usage windows and
// checks that the demo key's calls reach the quota service mounted on
// the control plane's address, delivered in process: every call counted
// by status class, and only those the backend answered billable.
func TestDevCountsUsage(t *testing.T) {
	addr, tlsAddr, ctlAddr, dataDir := freeAddr(t), freeAddr(t), freeAddr(t), t.TempDir()
	p := start(t, "dev", "-addr", addr, "-tls-addr", tlsAddr, "-control-addr", ctlAddr, "-data-dir", dataDir, "-usage-window", "300ms")
	p.waitLine(t, regexp.MustCompile(`porticoctl usage list`))
	key, keyID, _ := devCredentials(t, p.output())
	if !strings.Contains(p.output(), "porticoctl usage get key:"+keyID+"\n") {
		t.Errorf("dev banner does not show how to read the demo key's usage (porticoctl usage get key:%s)", keyID)
	}

	call := func(method, path, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 3 {
		if code := call("GET", "/inventory/v1/items", ""); code != 200 {
			t.Fatalf("GET with the demo key = %d, want 200", code)
		}
	}
	// Refused by the gateway (the key lacks inventory:write): counted,
	// not billable.
	if code := call("POST", "/inventory/v1/items", `{"sku":"NUT-5","name":"Nut","quantity":1,"price_cents":5}`); code != 403 {
		t.Fatalf("POST with the demo key = %d, want 403", code)
	}

	platform, err := os.ReadFile(filepath.Join(dataDir, "platform-token"))
	if err != nil {
		t.Fatal(err)
	}
	period := time.Now().UTC().Format("2006-01")
	var got struct {
		Totals []struct {
			Product  string
			Counted  string
			Billable string
			ByClass  []string
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("POST", "http://"+ctlAddr+"/portico.quota.v1.QuotaService/GetUsage",
			strings.NewReader(`{"subject":"key:`+keyID+`","period":"`+period+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(platform)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GetUsage = %d %s", resp.StatusCode, b)
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("GetUsage answered %s: %v", b, err)
		}
		if len(got.Totals) == 1 && got.Totals[0].Counted == "4" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GetUsage of the demo key = %s, want 4 calls counted", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	tot := got.Totals[0]
	if tot.Product != "inventory-api" || tot.Billable != "3" || len(tot.ByClass) != 6 || tot.ByClass[2] != "3" || tot.ByClass[4] != "1" {
		t.Errorf("the demo key's total = %+v, want inventory-api, 4 counted (3 2xx, 1 4xx), 3 billable", tot)
	}
}
