/**
 * Referrer hosts → traffic source names. Data only; the lookup lives in traffic-source.ts.
 *
 * Hosts are lower case without `www.`. A host also matches its subdomains (the lookup walks up the labels and takes
 * the most specific entry), so `mail.google.com` → Gmail wins over `google.com` → Google, and `de.search.yahoo.com`
 * needs no entry of its own. Android app referrers (`android-app://com.google.android.gm/`) carry the package name as
 * their host, so packages are listed like hosts.
 *
 * To add a source: one line here, one row in test/enrich.test.ts.
 */
export const KNOWN_SOURCE_HOSTS: Readonly<Record<string, string>> = {
  // search engines
  'google.com': 'Google',
  'com.google.android.googlequicksearchbox': 'Google',
  'news.google.com': 'Google News',
  'play.google.com': 'Google Play',
  'docs.google.com': 'Google Docs',
  'scholar.google.com': 'Google Scholar',
  'googleads.g.doubleclick.net': 'Google Ads',
  'bing.com': 'Bing',
  'msn.com': 'MSN',
  'duckduckgo.com': 'DuckDuckGo',
  'yahoo.com': 'Yahoo',
  'search.yahoo.com': 'Yahoo',
  'ya.ru': 'Yandex',
  'baidu.com': 'Baidu',
  'ecosia.org': 'Ecosia',
  'search.brave.com': 'Brave',
  'qwant.com': 'Qwant',
  'startpage.com': 'Startpage',
  'naver.com': 'Naver',
  'seznam.cz': 'Seznam',
  'sogou.com': 'Sogou',
  'so.com': '360 Search',
  'kagi.com': 'Kagi',
  'you.com': 'You.com',
  'search.aol.com': 'AOL',
  'ask.com': 'Ask',

  // AI assistants
  'chatgpt.com': 'ChatGPT',
  'chat.openai.com': 'ChatGPT',
  'perplexity.ai': 'Perplexity',
  'claude.ai': 'Claude',
  'gemini.google.com': 'Gemini',
  'copilot.microsoft.com': 'Copilot',
  'phind.com': 'Phind',

  // social networks and communities
  'twitter.com': 'Twitter',
  'x.com': 'Twitter',
  't.co': 'Twitter',
  'com.twitter.android': 'Twitter',
  'facebook.com': 'Facebook',
  'm.facebook.com': 'Facebook',
  'l.facebook.com': 'Facebook',
  'lm.facebook.com': 'Facebook',
  'fb.me': 'Facebook',
  'fb.com': 'Facebook',
  'com.facebook.katana': 'Facebook',
  'instagram.com': 'Instagram',
  'l.instagram.com': 'Instagram',
  'threads.net': 'Threads',
  'bsky.app': 'Bluesky',
  'linkedin.com': 'LinkedIn',
  'lnkd.in': 'LinkedIn',
  'com.linkedin.android': 'LinkedIn',
  'reddit.com': 'Reddit',
  'old.reddit.com': 'Reddit',
  'out.reddit.com': 'Reddit',
  'redd.it': 'Reddit',
  'com.reddit.frontpage': 'Reddit',
  'news.ycombinator.com': 'Hacker News',
  'lobste.rs': 'Lobsters',
  'producthunt.com': 'Product Hunt',
  'pinterest.com': 'Pinterest',
  'pin.it': 'Pinterest',
  'tiktok.com': 'TikTok',
  'snapchat.com': 'Snapchat',
  'tumblr.com': 'Tumblr',
  'quora.com': 'Quora',
  'vk.com': 'VK',
  'weibo.com': 'Weibo',
  'mastodon.social': 'Mastodon',
  'mastodon.online': 'Mastodon',
  'mastodon.world': 'Mastodon',
  'mas.to': 'Mastodon',
  'mstdn.social': 'Mastodon',
  'fosstodon.org': 'Mastodon',
  'hachyderm.io': 'Mastodon',
  'infosec.exchange': 'Mastodon',

  // video
  'youtube.com': 'YouTube',
  'm.youtube.com': 'YouTube',
  'youtu.be': 'YouTube',
  'vimeo.com': 'Vimeo',
  'twitch.tv': 'Twitch',

  // messengers and team chat
  't.me': 'Telegram',
  'web.telegram.org': 'Telegram',
  'org.telegram.messenger': 'Telegram',
  'whatsapp.com': 'WhatsApp',
  'web.whatsapp.com': 'WhatsApp',
  'wa.me': 'WhatsApp',
  'slack.com': 'Slack',
  'app.slack.com': 'Slack',
  'com.slack': 'Slack',
  'discord.com': 'Discord',
  'discord.gg': 'Discord',
  'discordapp.com': 'Discord',
  'teams.microsoft.com': 'Microsoft Teams',

  // webmail
  'mail.google.com': 'Gmail',
  'com.google.android.gm': 'Gmail',
  'outlook.live.com': 'Outlook',
  'outlook.office.com': 'Outlook',
  'outlook.office365.com': 'Outlook',
  'mail.yahoo.com': 'Yahoo Mail',
  'mail.proton.me': 'Proton Mail',
  'mail.protonmail.com': 'Proton Mail',
  'icloud.com': 'iCloud Mail',
  'gmx.net': 'GMX',
  'web.de': 'WEB.DE',

  // developer and publishing sites
  'github.com': 'GitHub',
  'gitlab.com': 'GitLab',
  'stackoverflow.com': 'Stack Overflow',
  'stackexchange.com': 'Stack Exchange',
  'dev.to': 'DEV',
  'medium.com': 'Medium',
  'substack.com': 'Substack',
  'wikipedia.org': 'Wikipedia',
  'flipboard.com': 'Flipboard',
  'feedly.com': 'Feedly',
};

/**
 * Families of regional domains that a host table cannot list one by one (google.de, google.co.uk, google.com.br, ...).
 * Tested against each candidate host of the walk, after the table entry of the same candidate.
 */
const COUNTRY_TLD = String.raw`(?:[a-z]{2,3}|com?\.[a-z]{2})`;
export const KNOWN_SOURCE_PATTERNS: ReadonlyArray<readonly [RegExp, string]> = [
  [new RegExp(`^google\\.${COUNTRY_TLD}$`), 'Google'],
  [new RegExp(`^yahoo\\.${COUNTRY_TLD}$`), 'Yahoo'],
  [new RegExp(`^yandex\\.${COUNTRY_TLD}$`), 'Yandex'],
  [new RegExp(`^bing\\.${COUNTRY_TLD}$`), 'Bing'],
  [new RegExp(`^pinterest\\.${COUNTRY_TLD}$`), 'Pinterest'],
  [new RegExp(`^amazon\\.${COUNTRY_TLD}$`), 'Amazon'],
  [/^(?:mastodon|mstdn)\.[a-z0-9.-]+$/, 'Mastodon'],
];
