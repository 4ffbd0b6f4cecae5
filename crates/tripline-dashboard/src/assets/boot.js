// Loaded before the page's script: keeps every script error, failed resource and unhandled
// promise rejection (in window.__triplineErrors) and shows it, so a broken page says so
// instead of silently going stale.
(function () {
  'use strict';
  var errors = [];
  window.__triplineErrors = errors;
  function keep(message) {
    errors.push(String(message));
    var el = document.getElementById('script-errors');
    if (el) {
      el.hidden = false;
      el.textContent = 'Page error: ' + errors[errors.length - 1];
    }
  }
  window.addEventListener('error', function (e) {
    var t = e.target;
    if (t && t !== window && (t.src || t.href)) {
      keep('failed to load ' + (t.src || t.href));
    } else {
      keep(e.message + ' (' + e.filename + ':' + e.lineno + ')');
    }
  }, true);
  window.addEventListener('unhandledrejection', function (e) {
    var r = e.reason;
    keep('unhandled rejection: ' + (r && r.message ? r.message : r));
  });
  document.addEventListener('securitypolicyviolation', function (e) {
    keep('the content security policy blocked ' + (e.blockedURI || 'inline code') + ' (' + e.violatedDirective + ')');
  });
  var original = console.error;
  console.error = function () {
    keep(Array.prototype.map.call(arguments, String).join(' '));
    return original.apply(console, arguments);
  };
})();
