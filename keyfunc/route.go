package keyfunc

import (
	"fmt"
	"net/http"
)

// Route keys a request by its route pattern, such as "/items/{id}": every
// request to one route shares a key, whatever the IDs in its path and
// whatever its method. It never uses the raw path, whose IDs would make a
// new key for every item, nor the method, which the client chooses: a HEAD
// counts with the GET it mirrors, and a route registered for every method
// is one key however many methods, real or made up, a client sends. For a
// limit per method, use [RouteMethod]. Combine it with a caller key using
// [Join] for a per-caller, per-route limit.
//
// A request whose route is unknown ([Request.Route] returns "", as for a
// request no route matched) is an error wrapping [ErrNoKey].
func Route(r Request) (string, error) {
	route := r.Route()
	if route == "" {
		return "", fmt.Errorf("%w: route pattern unknown", ErrNoKey)
	}
	return route, nil
}

// RouteMethod keys a request by its method and route pattern, such as
// "DELETE /items/{id}", for a limit per method of a route. The method is
// folded so that a client cannot respell it into new keys: HEAD counts as
// GET, and every method other than GET, POST, PUT, PATCH, DELETE, OPTIONS,
// CONNECT and TRACE (methods are case-sensitive: "get" is one of those
// others) shares the one key "* pattern". A route registered for every
// method so has at most nine keys; prefer [Route] there.
//
// A request whose route is unknown is an error wrapping [ErrNoKey], as for
// [Route].
func RouteMethod(r Request) (string, error) {
	route := r.Route()
	if route == "" {
		return "", fmt.Errorf("%w: route pattern unknown", ErrNoKey)
	}
	return routeMethod(r.Method()) + " " + route, nil
}

// routeMethod returns the method a RouteMethod key names.
func routeMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead:
		return http.MethodGet
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "*"
}
