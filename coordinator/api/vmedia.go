package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/bmedge/bmedge/protocol"
)

// This file serves a node's virtual media as Ironic's API does (1.89:
// POST and DELETE /v1/nodes/{node}/vmedia; 1.93: GET), Metal3's
// dataImage. An attach or detach is done by the site's edge agent (the
// image fetched into its cache under its fetch rule, the BMC given the
// cache's copy): 204 once the coordinator took it, as Ironic answers
// before its worker runs; the outcome is in the node's history and
// last_error. Below 1.89 the path is 404 (nodeSubSince), GET below 1.93
// too.

// vmediaSchemes are the URL schemes Ironic takes for an attach
// (image_publisher.VMEDIA_SUPPORTED_URL_SCHEMES).
var vmediaSchemes = []string{"http", "https", "nfs", "cifs", "smb"}

// attachVMedia is POST /v1/nodes/{node}/vmedia.
func (s *Server) attachVMedia(w http.ResponseWriter, r *http.Request) {
	var raw map[string]json.RawMessage
	if !decode(w, r, &raw) {
		return
	}
	var extra []string
	for k := range raw {
		if k != "device_type" && k != "image_url" && k != "image_download_source" {
			extra = append(extra, fmt.Sprintf("'%s'", k))
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		verb := "was"
		if len(extra) > 1 {
			verb = "were"
		}
		writeError(w, 400, fmt.Sprintf("Additional properties are not allowed (%s %s unexpected)", strings.Join(extra, ", "), verb))
		return
	}
	str := func(k string) (string, bool, error) {
		v, ok := raw[k]
		if !ok {
			return "", false, nil
		}
		var x string
		if err := json.Unmarshal(v, &x); err != nil {
			return "", true, fmt.Errorf("%s is not of type 'string'", string(v))
		}
		return x, true, nil
	}
	var args protocol.VMediaArgs
	args.Op = protocol.VMediaAttach
	for _, k := range []string{"device_type", "image_url"} {
		v, ok, err := str(k)
		if err != nil {
			writeError(w, 400, err.Error())
			return
		}
		if !ok {
			writeError(w, 400, fmt.Sprintf("'%s' is a required property", k))
			return
		}
		if k == "device_type" {
			args.DeviceType = v
		} else {
			args.ImageURL = v
		}
	}
	if !slices.Contains(protocol.VMediaDeviceTypes(), args.DeviceType) {
		writeError(w, 400, fmt.Sprintf("'%s' is not one of ['disk', 'cdrom', 'floppy']", args.DeviceType))
		return
	}
	src, given, err := str("image_download_source")
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	if given && !slices.Contains([]string{"http", "local", "swift"}, src) {
		writeError(w, 400, fmt.Sprintf("'%s' is not one of ['http', 'local', 'swift']", src))
		return
	}
	if given && src != "local" {
		writeError(w, 400, fmt.Sprintf("image_download_source %q is not supported here: the edge agent fetches the image into its site's image cache (under its fetch rule) and the BMC reads the cache's copy, which is Ironic's \"local\"; leave image_download_source out or set it to local", src))
		return
	}
	u, err := url.Parse(args.ImageURL)
	scheme := ""
	if err == nil {
		scheme = u.Scheme
	}
	if !slices.Contains(vmediaSchemes, scheme) {
		writeError(w, 400, "Unsupported or missing URL scheme: "+scheme)
		return
	}
	if scheme != "http" && scheme != "https" || u.Host == "" {
		writeError(w, 400, fmt.Sprintf("Unsupported URL scheme here: %s; the site's image cache fetches http:// and https:// images only (give an http(s) URL with a host)", scheme))
		return
	}
	if len(args.ImageURL) > protocol.MaxISOURLBytes {
		writeError(w, 400, fmt.Sprintf("image_url is %d bytes; at most %d are taken", len(args.ImageURL), protocol.MaxISOURLBytes))
		return
	}
	if err := s.e.VMedia(r.PathValue("id"), args); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(204)
}

// detachVMedia is DELETE /v1/nodes/{node}/vmedia[?device_types=a,b].
func (s *Server) detachVMedia(w http.ResponseWriter, r *http.Request) {
	args := protocol.VMediaArgs{Op: protocol.VMediaDetach}
	var invalid []string
	for _, v := range r.URL.Query()["device_types"] {
		for _, d := range strings.Split(v, ",") {
			d = strings.TrimSpace(d)
			if d == "" {
				continue
			}
			if !slices.Contains(protocol.VMediaDeviceTypes(), d) {
				invalid = append(invalid, d)
				continue
			}
			if !slices.Contains(args.DeviceTypes, d) {
				args.DeviceTypes = append(args.DeviceTypes, d)
			}
		}
	}
	if len(invalid) > 0 {
		writeError(w, 400, fmt.Sprintf("Invalid device type(s) %s (valid are %s)", strings.Join(invalid, ", "), strings.Join(protocol.VMediaDeviceTypes(), ", ")))
		return
	}
	if err := s.e.VMedia(r.PathValue("id"), args); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(204)
}

// getVMedia is GET /v1/nodes/{node}/vmedia (1.93): the BMC's virtual
// media devices as the edge agent read them back after the node's last
// attach or detach, in Ironic's shape (a list of media_types, inserted,
// image).
func (s *Server) getVMedia(w http.ResponseWriter, r *http.Request) {
	if apiMinor(r) < 93 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The resource %s could not be found.", r.URL.Path))
		return
	}
	l, err := s.e.VirtualMedia(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, l)
}
