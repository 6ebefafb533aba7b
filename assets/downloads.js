/*
 * Downloads by their own route. A page's download store (app.ui.start_downloads) is given a link to
 * /download/<token> (app/transfers.py), which streams a session's file from disk with Content-Disposition:
 * attachment; this function, the store's clientside callback, starts the download without leaving the page (the
 * file never travels as base64 in a callback's answer). Plain ES2017, no dependency.
 */
(function () {
  "use strict";

  function startDownload(href) {
    if (typeof href === "string" && href.indexOf("/download/") === 0) {
      const link = document.createElement("a");
      link.href = href;
      link.rel = "noopener";
      document.body.appendChild(link);
      link.click();
      link.remove();
    }
    return window.dash_clientside.no_update;
  }

  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    chmm: Object.assign({}, (window.dash_clientside || {}).chmm, { startDownload: startDownload }),
  });
})();
